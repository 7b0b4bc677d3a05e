#!/usr/bin/env bash
# test_mpi_balance_cli.sh ZEPHON MPIRUN - `zephon run --balance-ranks K`
# under mpirun (docs/mpi.md, "Attention-cost balance across ranks"): 4
# ranks on a long-tailed corpus (zephon gen: documents of 200 B - 20 KB),
# best-fit packing, document masking, K = 2 microbatches per rank a step.
#  1. every step delivers, over the 4 ranks, the samples of the unbalanced
#     run's step (--emit-samples), and samples moved between ranks;
#  2. the summary and the cluster report (text, JSON, CSV, HTML) give the
#     step imbalance before and after: lower after;
#  3. a second run delivers the same batches (--emit-digest);
#  4. --max-batches 7 is rounded down to 6 (a step boundary), the state is
#     saved; a resumed run continues each rank's batches byte for byte;
#  5. a state inside a step (--save-every 3) is refused on every rank;
#  6. a rank given another K: every rank fails naming both values;
#  7. one process, K = 1: the pipeline's batches byte for byte (the
#     batches made again: cu_seqlens, rows_filled);
#  8. record mode (no --tokenize) is refused.
# The rows themselves (digests per step) are test_mpi_balance's.
set -u
Z=$(realpath "${1:?usage: test_mpi_balance_cli.sh ZEPHON MPIRUN}")
MPIRUN=${2:-mpirun}
. "$(dirname "$0")/mpilib.sh"

"$Z" gen --out "$T/d" --shards 4 --samples-per-shard 60 --seed 5 >/dev/null || { echo "FAIL - gen"; exit 1; }
args=("$T/d" --seed 3 --quiet --threads 1 --tokenize gpt2:1 --pack bestfit:8 --seq-len 511
      --microbatch 4 --doc-masking)
d="$T/bal"; mkdir -p "$d"

# the samples of each step of K=2 batches over every rank, steps < $1
step_samples() { local n=$1; shift; cat "$@" | awk -v n="$n" '{w = int($1 / 2); if (w < n) print w, $2, $3, $4, $5, $6}' | sort; }

run -np 4 "$Z" run "${args[@]}" --emit-samples "$d/u" > "$d/u.out" 2> "$d/u.err"; rc=$?
check "the unbalanced 4-rank run (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/u.err"
run -np 4 "$Z" run "${args[@]}" --balance-ranks 2 --emit-samples "$d/b" --emit-digest "$d/b.dg" \
  --report "$d/rep" > "$d/b.out" 2> "$d/b.err"; rc=$?
check "the balanced 4-rank run, --balance-ranks 2 (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/b.err"
steps=$(( $(wc -l < "$d/b.dg.rank-0") / 2 ))
step_samples "$steps" "$d"/u/rank-*.samples > "$d/u.steps"
step_samples "$steps" "$d"/b/rank-*.samples > "$d/b.steps"
check "$steps steps: each step's samples over the ranks are the unbalanced run's" \
  '[[ $steps -ge 4 && -s "$d/b.steps" ]] && cmp -s "$d/u.steps" "$d/b.steps"'
moved=0
for r in 0 1 2 3; do cmp -s "$d/u/rank-$r.samples" "$d/b/rank-$r.samples" || moved=1; done
check "samples moved between ranks" '[[ $moved -eq 1 ]]'

line=$(grep "cross-rank balance" "$d/b.out")
check "the summary gives the step imbalance before and after: '$line'" "python3 -c '
import re, sys
m = re.search(r\"ranks ([0-9.]+) -> ([0-9.]+), microbatches ([0-9.]+) -> ([0-9.]+)\", sys.argv[1])
rb, ra, mb, ma = map(float, m.groups())
sys.exit(0 if ra <= rb and ma < mb else 1)' '$line'"
check "the cluster report has the section (text, JSON, CSV, HTML)" \
  "grep -q '^attention-cost balance' '$d/rep/report.txt' && grep -q 'microbatches per step' '$d/rep/report.txt' &&
   head -1 '$d/rep/report.csv' | grep -q ',step_microbatch_imbalance_after\$' &&
   grep -q 'Attention-cost balance' '$d/rep/report.html' &&
   python3 -c '
import json, sys
x = json.load(open(sys.argv[1]))[\"attn_balance\"][\"across_ranks\"]
sys.exit(0 if x[\"window\"] == 2 and x[\"steps\"] == int(sys.argv[2]) and
         x[\"microbatch_imbalance_after\"] < x[\"microbatch_imbalance_before\"] and
         x[\"rank_imbalance_after\"] <= x[\"rank_imbalance_before\"] else 1)' '$d/rep/report.json' $steps"
run -np 4 "$Z" run "${args[@]}" --report "$d/rep0" > /dev/null 2>&1
check "a run without balance has no such section" \
  "! grep -q 'attention-cost balance' '$d/rep0/report.txt' && ! grep -q imbalance '$d/rep0/report.csv'"

run -np 4 "$Z" run "${args[@]}" --balance-ranks 2 --emit-digest "$d/b2.dg" > /dev/null 2> "$d/b2.err"; rc=$?
same=$(( rc == 0 ))
for r in 0 1 2 3; do cmp -s "$d/b.dg.rank-$r" "$d/b2.dg.rank-$r" || same=0; done
check "deterministic: a second run delivers the same batches on every rank" '[[ $same -eq 1 ]]'

run -np 4 "$Z" run "${args[@]}" --balance-ranks 2 --max-batches 7 --save-state "$d/s.json" \
  --emit-digest "$d/r1.dg" > "$d/r1.out" 2> "$d/r1.err"; rc=$?
check "--max-batches 7 --save-state: 6 batches (a step boundary), the state written (rc $rc)" \
  '[[ $rc -eq 0 && -s "$d/s.json" && $(wc -l < "$d/r1.dg.rank-0") -eq 6 ]]' || tail -5 "$d/r1.err"
run -np 4 "$Z" run "${args[@]}" --balance-ranks 2 --resume "$d/s.json" --emit-digest "$d/r2.dg" \
  > "$d/r2.out" 2> "$d/r2.err"; rc=$?
same=$(( rc == 0 ))
for r in 0 1 2 3; do
  cat "$d/r1.dg.rank-$r" "$d/r2.dg.rank-$r" | cmp -s - "$d/b.dg.rank-$r" || same=0
done
check "resumed at the step boundary: each rank's batches byte for byte (rc $rc)" '[[ $same -eq 1 ]]'

run -np 4 "$Z" run "${args[@]}" --balance-ranks 2 --max-batches 8 --save-state "$d/in.json" \
  --save-every 3 > "$d/in.out" 2> "$d/in.err"; rc=$?
check "a state inside a step (--save-every 3): refused, saying to save at a step boundary (rc $rc)" \
  '[[ $rc -ne 0 && $rc -ne 124 && ! -e "$d/in.json" ]] && grep -q "save at a step boundary (after a multiple of 2" "$d/in.err"'

run -np 3 "$Z" run "${args[@]}" --balance-ranks 2 --max-batches 4 : \
  -np 1 "$Z" run "${args[@]}" --balance-ranks 3 --max-batches 4 > "$d/k.out" 2> "$d/k.err"; rc=$?
check "another K on one rank: every rank fails naming both values (rc $rc)" \
  '[[ $rc -ne 0 && $rc -ne 124 ]] && [[ $(grep -c "different windows: rank 3: 3, rank 0: 2" "$d/k.err") -eq 4 ]]'

# one process without a launcher, K = 1: nothing to move, and the batches
# made again (cu_seqlens, rows_filled) are the pipeline's, byte for byte
timeout 120 "$Z" run "${args[@]}" --balance-ranks 1 --emit-digest "$d/one1.dg" > /dev/null 2>&1; rc1=$?
timeout 120 "$Z" run "${args[@]}" --emit-digest "$d/one0.dg" > /dev/null 2>&1; rc0=$?
check "one process, --balance-ranks 1: the pipeline's batches byte for byte ($rc1 $rc0)" \
  '[[ $rc1 -eq 0 && $rc0 -eq 0 && -s "$d/one1.dg" ]] && cmp -s "$d/one1.dg" "$d/one0.dg"'

run -np 2 "$Z" run "$T/d" --quiet --threads 1 --microbatch 4 --balance-ranks 2 \
  > "$d/rec.out" 2> "$d/rec.err"; rc=$?
check "record mode: refused on every rank (rc $rc)" \
  '[[ $rc -ne 0 && $rc -ne 124 ]] && [[ $(grep -c "record mode" "$d/rec.err") -eq 2 ]]'

finish
