#!/usr/bin/env bash
# test_mpi_coverage.sh ZEPHON MPIRUN - the coverage certificate under mpirun
# (docs/report.md, "Coverage certificate"): a 3-part mixture, an epoch of
# 601 draws (the ranks' shares padded), two epochs, 4 ranks oversubscribed.
#  1. records: rank 0 prints "every sample once" for both epochs, and the
#     report (--report) carries it: report.txt, report.json, coverage.csv,
#     report.html;
#  2. rank 2 drops one sample (ZEPHON_TEST_DROP_SAMPLE=2, a map callback
#     filtering one record): the certificate fails for epoch 0, 1 missing,
#     naming rank 2 and only it; epoch 1 still certified;
#  3. elastic resume: 4 ranks stop after 7 steps and save the job state, 3
#     ranks resume it: the resumed run certifies both epochs (the state
#     carries the digests of what was delivered before), in record mode
#     and with concat packing (epoch 0);
#  3b. an exact resume after the elastic one is certified; a state edited
#     to move one rank's position back or forth: 1 repeated or 1 missing,
#     that rank named;
#  4. concat packing on 4 ranks: the ranks stop at the shortest stream's
#     last batch, so the longer ranks' last documents are not delivered:
#     the certificate says so for the last epoch (missing, the ranks not
#     past it), and certifies epoch 0;
#  5. --no-coverage: no certificate;
#  6. without a launcher: a plain run prints its own line per epoch
#     (against the epoch's stream; with --rank/--world-size against the
#     rank's plan), in --json too, and a dropped sample fails it; with
#     --report (a world of one) the report carries the certificate.
set -u
Z=$(realpath "${1:?usage: test_mpi_coverage.sh ZEPHON MPIRUN}")
MPIRUN=${2:-mpirun}
. "$(dirname "$0")/mpilib.sh"

gen_parts
args=(--data "$T/a@0.5" --data "$T/b@0.3" --data "$T/c@0.2" --seed 4 --epoch-samples 601 --epochs 2
      --quiet --threads 1 --microbatch 8)

# 1. the passing case
d="$T/ok"; mkdir -p "$d"
run -np 4 "$Z" run "${args[@]}" > "$d/out" 2> "$d/err"; rc=$?
check "4 ranks, records, 2 epochs (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/err"
check "epoch 0 certified" 'grep -qx "coverage: epoch 0: every sample once (601 samples, 4 ranks, 3 padded)" "$d/out"'
check "epoch 1 certified" 'grep -qx "coverage: epoch 1: every sample once (601 samples, 4 ranks, 3 padded)" "$d/out"'
check "printed by rank 0 only" '[[ $(grep -c "^coverage: epoch 0" "$d/out") -eq 1 ]]'
run -np 4 "$Z" run "${args[@]}" --report "$d/rep" > "$d/rout" 2> "$d/rerr"; rc=$?
check "with --report (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/rerr"
check "report.txt has the certificate" 'grep -q "^  epoch 1: every sample once (601 samples, 4 ranks, 3 padded)" "$d/rep/report.txt"'
check "report.json: both epochs every sample once" "python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))[\"coverage\"]
sys.exit(0 if [x[\"epoch\"] for x in c] == [0, 1] and
         all(x[\"every_sample_once\"] and x[\"judged\"] and x[\"delivered\"] == 601 and
             x[\"expected\"] == 601 and x[\"padded\"] == 3 and x[\"missing\"] == 0 and
             x[\"delivered_digest\"] == x[\"expected_digest\"] for x in c) else 1)' '$d/rep/report.json'"
check "coverage.csv: a header and one row per epoch" \
  '[[ $(wc -l < "$d/rep/coverage.csv") -eq 3 ]] && grep -q "^1,1,1,1,601,601,0,0,3,,,0$" "$d/rep/coverage.csv"'
check "report.html has the certificate" 'grep -q "<h2>Coverage certificate</h2>" "$d/rep/report.html" && grep -q "<li class=\"ok\">epoch 0: every sample once" "$d/rep/report.html"'

# 2. one sample dropped on rank 2
d="$T/drop"; mkdir -p "$d"
ZEPHON_TEST_DROP_SAMPLE=2 run -np 4 -x ZEPHON_TEST_DROP_SAMPLE "$Z" run "${args[@]}" --report "$d/rep" \
  > "$d/out" 2> "$d/err"; rc=$?
check "rank 2 drops a sample (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/err"
check "epoch 0: the certificate fails, 1 missing, rank 2 named" \
  'grep -qx "  epoch 0: NOT every sample once: 1 missing (600 of 601 delivered, 3 padded); rank 2 differs from its plan" "$d/rep/report.txt"'
check "epoch 1 still certified" 'grep -q "^  epoch 1: every sample once" "$d/rep/report.txt"'
check "report.json: epoch 0 missing 1 on rank 2" "python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))[\"coverage\"][0]
sys.exit(0 if not c[\"every_sample_once\"] and c[\"missing\"] == 1 and c[\"repeated\"] == 0 and
         c[\"ranks_differing\"] == \"2\" else 1)' '$d/rep/report.json'"
check "report.html marks it" 'grep -q "<li class=\"bad\">epoch 0: NOT every sample once" "$d/rep/report.html"'

# 3. elastic resume, 4 ranks -> 3
for mode in records concat; do
  d="$T/el-$mode"; mkdir -p "$d"
  extra=(); [[ $mode == concat ]] && extra=(--tokenize gpt2:1 --pack concat --seq-len 63)
  run -np 4 "$Z" run "${args[@]}" "${extra[@]}" --max-batches 7 --save-state "$d/s.json" \
    > "$d/r1" 2> "$d/e1"; rc=$?
  check "$mode: 4 ranks, 7 steps, --save-state (rc $rc)" '[[ $rc -eq 0 && -s "$d/s.json" ]]' || tail -5 "$d/e1"
  check "$mode: the job state carries the digests" "grep -q '\"coverage\"' '$d/s.json'"
  check "$mode: zephon state show gives them" \
    '[[ $("$Z" state show "$d/s.json" | grep -c "^  coverage digest of epoch 0: [0-9]* samples") -eq 4 ]]'
  run -np 3 "$Z" run "${args[@]}" "${extra[@]}" --resume "$d/s.json" > "$d/r2" 2> "$d/e2"; rc=$?
  check "$mode: 3 ranks --resume (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/e2"
  check "$mode: epoch 0 certified across the resume" \
    'grep -Eq "^coverage: epoch 0: every sample once \(601 samples, 3 ranks" "$d/r2"'
  if [[ $mode == records ]]; then
    check "$mode: epoch 1 certified" 'grep -Eq "^coverage: epoch 1: every sample once \(601 samples, 3 ranks" "$d/r2"'
  fi
done

# 3b. the records' job state: resumed by 3 ranks for 5 steps and saved
# again, then resumed on 3 ranks (an exact resume after an elastic one):
# still certified; and states edited to move one rank's position back
# (a sample read twice) or forth (a sample skipped): the certificate fails
# with the count and names that rank
d="$T/el-records"
run -np 3 "$Z" run "${args[@]}" --resume "$d/s.json" --max-batches 5 --save-state "$d/s2.json" \
  > "$d/r3" 2> "$d/e3"; rc=$?
check "3 ranks resume for 5 steps and save (rc $rc)" '[[ $rc -eq 0 && -s "$d/s2.json" ]]' || tail -5 "$d/e3"
check "the digests summed by the re-split are marked merged" "grep -q '\"merged\": true' '$d/s2.json'"
run -np 3 "$Z" run "${args[@]}" --resume "$d/s2.json" > "$d/r4" 2> "$d/e4"; rc=$?
check "then 3 ranks resume that (rc $rc): both epochs certified" \
  '[[ $rc -eq 0 ]] && grep -Eq "^coverage: epoch 0: every sample once \(601 samples, 3 ranks" "$d/r4" && grep -Eq "^coverage: epoch 1: every sample once \(601 samples, 3 ranks" "$d/r4"'
d="$T/edit"; mkdir -p "$d"
run -np 4 "$Z" run "${args[@]}" --max-batches 7 --save-state "$d/s.json" > /dev/null 2> "$d/e0"
for how in "2 -1 repeated" "1 1 missing"; do
  read -r rk by what <<< "$how"
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); d["ranks"][int(sys.argv[2])]["position"] += int(sys.argv[3])
json.dump(d, open(sys.argv[4], "w"), indent=1)' "$d/s.json" "$rk" "$by" "$d/s$rk.json"
  run -np 4 "$Z" run "${args[@]}" --resume "$d/s$rk.json" > "$d/o$rk" 2> "$d/e$rk"; rc=$?
  check "rank $rk's position moved by $by in the state (rc $rc): 1 $what, rank $rk named" \
    '[[ $rc -eq 0 ]] && grep -Eq "^coverage: epoch 0: NOT every sample once: 1 $what .*; rank $rk differs from its plan$" "$d/o$rk" && grep -Eq "^coverage: epoch 1: every sample once" "$d/o$rk"'
done

# 4. concat packing: the ranks' ends
d="$T/tail"; mkdir -p "$d"
run -np 4 "$Z" run "${args[@]}" --tokenize gpt2:1 --pack concat --seq-len 63 --emit-samples "$d/s" \
  > "$d/out" 2> "$d/err"; rc=$?
check "4 ranks, concat packing (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/err"
check "some rank's last batch was not delivered" 'grep -q "batch(es) not delivered: another rank" "$d/out"'
check "epoch 0 certified" 'grep -Eq "^coverage: epoch 0: every sample once \(601 samples, 4 ranks" "$d/out"'
check "epoch 1: the documents not delivered are named, with the ranks not past the epoch" \
  'grep -Eq "^coverage: epoch 1: NOT every sample once: [0-9]+ missing \([0-9]+ of 601 delivered.*; ranks? [0-9,-]+ (is|are) not past the epoch$" "$d/out"'

check "the ranks not past it say which of their documents were not delivered" \
  'grep -Eq "^rank [0-9]+: coverage: epoch 1: [0-9]+ document\(s\) of this rank.s plan not delivered, from position [0-9]+ on" "$d/out"'
# what the training loop saw (--emit-samples lists the delivered batches'
# documents): the certificate's count, the held batches left out
seen=$(cat "$d"/s/rank-*.samples | awk '$2 == 1 && $5 == 0' | wc -l)
said=$(sed -nE 's/^coverage: epoch 1: NOT every sample once: [0-9]+ missing \(([0-9]+) of 601.*/\1/p' "$d/out")
check "epoch 1: the certificate's delivered count ($said) is what the loop saw ($seen)" '[[ -n $said && $said -eq $seen ]]'
per_rank=$(sed -nE 's/^rank [0-9]+: coverage: epoch 1: ([0-9]+) document.*/\1/p' "$d/out" | paste -sd+ | bc)
check "the ranks' documents not delivered add up to the missing ($per_rank + $said = 601)" '[[ $((per_rank + said)) -eq 601 ]]'

# 5. --no-coverage
run -np 2 "$Z" run "${args[@]}" --no-coverage > "$T/nc" 2> "$T/nce"; rc=$?
check "--no-coverage: no certificate (rc $rc)" '[[ $rc -eq 0 ]] && ! grep -q "^coverage:" "$T/nc"'

# 6. without a launcher
d="$T/plain"; mkdir -p "$d"
"$Z" run "${args[@]}" > "$d/out" 2> "$d/err"; rc=$?
check "plain run (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/err"
check "plain run: its own line per epoch" \
  'grep -qx "  coverage: epoch 0: every sample once (601 samples)" "$d/out" && grep -qx "  coverage: epoch 1: every sample once (601 samples)" "$d/out"'
ZEPHON_TEST_DROP_SAMPLE=0 "$Z" run "${args[@]}" > "$d/drop" 2>&1
check "plain run: a dropped sample fails it, with the filtered count" \
  'grep -qx "  coverage: epoch 0: NOT every sample once: 1 missing (600 of 601 delivered)" "$d/drop" && grep -q "^  coverage: not delivered by request in this run: 1 records filtered" "$d/drop"'
"$Z" run "${args[@]}" --rank 1 --world-size 4 > "$d/rank" 2>&1
check "--rank 1 --world-size 4: against the rank's plan" \
  'grep -qx "  coverage: epoch 0: this rank.s plan delivered (151 samples)" "$d/rank"'
"$Z" run "${args[@]}" --json > "$d/json" 2>&1
check "--json carries it" "python3 -c '
import json, sys
c = json.loads(open(sys.argv[1]).read())[\"coverage\"]
sys.exit(0 if [x[\"epoch\"] for x in c] == [0, 1] and all(x[\"ok\"] and x[\"delivered\"] == 601 for x in c) else 1)' '$d/json'"
"$Z" run "${args[@]}" --report "$d/rep" > "$d/solo" 2>&1; rc=$?
check "--report without a launcher (rc $rc): the report carries the certificate" \
  '[[ $rc -eq 0 ]] && grep -q "^  epoch 1: every sample once (601 samples, 1 rank)" "$d/rep/report.txt" && [[ $(wc -l < "$d/rep/coverage.csv") -eq 3 ]]'

finish
