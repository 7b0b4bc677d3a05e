#!/usr/bin/env bash
# test_mpi_bestfit.sh ZEPHON MPIRUN - best-fit packing under mpirun
# (docs/packing.md, "Best-fit packing"): a 3-part mixture, an epoch of 601
# draws (the ranks' shares padded), --pack bestfit:8, two epochs.
#  1. the uninterrupted 4-rank run delivers every draw of epoch 0 once;
#  2. 4 ranks stop after 6 steps, inside their windows, and write the job
#     state (window_rows, window_done); 3 ranks resume it: over both runs
#     every draw of epoch 0 exactly once, as the uninterrupted run;
#  3. 4 ranks resume it: each rank's batches, byte for byte (--emit-digest),
#     are the uninterrupted run's;
#  4. the summary line and the cluster report (--report: text, CSV, JSON)
#     give the padding and cut-document fractions;
#  5. a rank given another window is refused by the startup agreement.
# Token-level exactly-once across an elastic resume is test_resume's
# test_bestfit_elastic_tokens.
set -u
Z=$(realpath "${1:?usage: test_mpi_bestfit.sh ZEPHON MPIRUN}")
MPIRUN=${2:-mpirun}
. "$(dirname "$0")/mpilib.sh"

gen_parts
args=(--data "$T/a@0.5" --data "$T/b@0.3" --data "$T/c@0.2" --seed 4 --epoch-samples 601 --epochs 2
      --quiet --threads 1 --tokenize gpt2:1 --pack bestfit:8 --seq-len 127 --microbatch 2)

d="$T/bf"; mkdir -p "$d"

run -np 4 "$Z" run "${args[@]}" --emit-samples "$d/full" --emit-digest "$d/full.dg" \
  --report "$d/rep" > "$d/full.out" 2> "$d/full.err"; rc=$?
check "the uninterrupted 4-rank run (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/full.err"
epoch0_draws "$d"/full/rank-*.samples > "$d/full.draws"
check "it delivers the epoch's 601 draws once each" \
  '[[ $(wc -l < "$d/full.draws") -eq 601 && $(uniq -d "$d/full.draws" | wc -l) -eq 0 ]]'

run -np 4 "$Z" run "${args[@]}" --max-batches 6 --save-state "$d/s.json" \
  --emit-samples "$d/r1" --emit-digest "$d/r1.dg" > "$d/r1.out" 2> "$d/r1.err"; rc=$?
check "4 ranks, 6 steps, --save-state (rc $rc)" '[[ $rc -eq 0 && -s "$d/s.json" ]]' || tail -5 "$d/r1.err"
check "the job state: ranks stopped inside a window, with the documents of it delivered" \
  "python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
inside = [r for r in d[\"ranks\"] if r.get(\"window_rows\", 0) > 0]
sys.exit(0 if len(d[\"ranks\"]) == 4 and len(inside) >= 2 and
         all(\"window_done\" in r for r in inside) else 1)' '$d/s.json'"

run -np 3 "$Z" run "${args[@]}" --resume "$d/s.json" --emit-samples "$d/r2" \
  > "$d/r2.out" 2> "$d/r2.err"; rc=$?
check "3 ranks --resume the 4 ranks' state (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/r2.err"
epoch0_draws "$d"/r1/rank-*.samples "$d"/r2/rank-*.samples > "$d/both.draws"
dups=$(uniq -d "$d/both.draws" | wc -l)
check "4 ranks then 3: no draw of the epoch twice ($dups repeated)" '[[ $dups -eq 0 ]]'
check "4 ranks then 3: every draw of the epoch ($(wc -l < "$d/both.draws") of 601)" \
  'cmp -s "$d/both.draws" "$d/full.draws"'

run -np 4 "$Z" run "${args[@]}" --resume "$d/s.json" --emit-digest "$d/r3.dg" \
  > "$d/r3.out" 2> "$d/r3.err"; rc=$?
check "4 ranks --resume on 4 ranks (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/r3.err"
same=$(( rc == 0 ))
for r in 0 1 2 3; do
  cat "$d/r1.dg.rank-$r" "$d/r3.dg.rank-$r" > "$d/cat.$r"
  [[ -s "$d/r3.dg.rank-$r" ]] && cmp -s "$d/cat.$r" "$d/full.dg.rank-$r" || same=0
done
check "4 ranks resumed on 4: each rank's batches byte for byte" '[[ $same -eq 1 ]]'
check "the summary names the packing and its fractions" 'grep -q "packing bestfit (window 8): padding" "$d/full.out"'
check "the cluster report has the padding and cut-document fractions (text, CSV, JSON)" \
  "grep -q '^  padding_fraction ' '$d/rep/report.txt' && grep -q '^  cut_fraction ' '$d/rep/report.txt' &&
   head -1 '$d/rep/report.csv' | grep -q ',pad_tokens,cut_documents,padding_frac,cut_frac,au_frac,job_au_frac,job_au_passes\$' &&
   python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))[\"totals\"]
sys.exit(0 if t[\"cut_documents\"] > 0 and 0 < t[\"cut_fraction\"] < 1 and
         0 < t[\"padding_fraction\"] < 1 else 1)' '$d/rep/report.json'"

# ranks given other windows: refused by the startup agreement, naming it
run -np 2 "$Z" run "${args[@]}" --max-batches 2 : -np 1 "$Z" run "${args[@]}" --pack bestfit:16 \
  --max-batches 2 > "$d/w.out" 2> "$d/w.err"; rc=$?
check "another window on one rank: every rank fails naming pack_window ($rc)" \
  '[[ $rc -ne 0 && $rc -ne 124 ]] && [[ $(grep -c "pack_window=8 .*pack_window=16" "$d/w.err") -eq 3 ]]'

finish
