#!/usr/bin/env bash
# test_mpi_elastic.sh ZEPHON MPIRUN - elastic resume under mpirun: 4 ranks
# run part of an epoch of a 3-part mixture (shuffled, an epoch of 601 draws
# so that the ranks' shares are padded) and write the job state
# (--save-state: every rank's state merged by rank 0); then 3 ranks
# --resume it and run the rest of the epoch (and the next). The union over
# both runs and every rank of the epoch's samples (--emit-samples; padded
# samples left out) is every draw of the epoch exactly once, the same
# draws as an uninterrupted 4-rank run delivers, in the weights'
# proportions. In record mode and with token concat packing (a document
# cut by the save is listed once, in the batch holding its first token).
# Also: a state saved on 4 ranks restored on 4 continues every rank's exact
# stream; ranks given other weights are refused by the startup agreement.
set -u
Z=$(realpath "${1:?usage: test_mpi_elastic.sh ZEPHON MPIRUN}")
MPIRUN=${2:-mpirun}
. "$(dirname "$0")/mpilib.sh"

gen_parts
mix=(--data "$T/a@0.5" --data "$T/b@0.3" --data "$T/c@0.2" --seed 4 --epoch-samples 601 --epochs 2
     --quiet --threads 1)

for mode in rec tok; do
  if [[ $mode == rec ]]; then
    args=("${mix[@]}" --microbatch 5); cut=10
  else
    args=("${mix[@]}" --tokenize gpt2:1 --pack concat --seq-len 127 --microbatch 2); cut=6
  fi
  d="$T/$mode"; mkdir -p "$d"
  run -np 4 "$Z" run "${args[@]}" --emit-samples "$d/full" > "$d/full.out" 2> "$d/full.err"; rc=$?
  check "$mode: the uninterrupted 4-rank run (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/full.err"
  epoch0_draws "$d"/full/rank-*.samples > "$d/full.draws"
  check "$mode: the uninterrupted run delivers the epoch's 601 draws once each" \
    '[[ $(wc -l < "$d/full.draws") -eq 601 && $(uniq -d "$d/full.draws" | wc -l) -eq 0 ]]'

  # 4 ranks: $cut steps, the job state; then 3 ranks resume it
  run -np 4 "$Z" run "${args[@]}" --max-batches $cut --save-state "$d/s.json" \
    --emit-samples "$d/r1" > "$d/r1.out" 2> "$d/r1.err"; rc=$?
  check "$mode: 4 ranks, $cut steps, --save-state (rc $rc)" '[[ $rc -eq 0 && -s "$d/s.json" ]]' || tail -5 "$d/r1.err"
  check "$mode: one job state holding the 4 ranks, no temporary file left" \
    "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d[\"version\"]==1 and len(d[\"ranks\"])==4 else 1)' '$d/s.json' && [[ -z \$(ls '$d' | grep '\\.tmp') ]]"
  run -np 3 "$Z" run "${args[@]}" --resume "$d/s.json" --emit-samples "$d/r2" \
    > "$d/r2.out" 2> "$d/r2.err"; rc=$?
  check "$mode: 3 ranks --resume the 4 ranks' state (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/r2.err"
  epoch0_draws "$d"/r1/rank-*.samples "$d"/r2/rank-*.samples > "$d/both.draws"
  dups=$(uniq -d "$d/both.draws" | wc -l)
  check "$mode: 4 ranks then 3 ranks: no draw of the epoch twice ($dups repeated)" '[[ $dups -eq 0 ]]'
  check "$mode: 4 ranks then 3 ranks: every draw of the epoch ($(wc -l < "$d/both.draws") of 601)" \
    'cmp -s "$d/both.draws" "$d/full.draws"'
  check "$mode: the first run delivered part of the epoch only" \
    '[[ $(epoch0_draws "$d"/r1/rank-*.samples | wc -l) -gt 0 && $(epoch0_draws "$d"/r1/rank-*.samples | wc -l) -lt 601 ]]'
  check "$mode: the epoch's draws per part: 300/180/120 (+-1)" "awk '{c[\$1]++} END {exit !(c[0]>=299 && c[0]<=301 && c[1]>=179 && c[1]<=181 && c[2]>=119 && c[2]<=121)}' '$d/both.draws'"

  # the same world size: every rank's exact stream
  run -np 4 "$Z" run "${args[@]}" --resume "$d/s.json" --emit-samples "$d/r3" \
    > "$d/r3.out" 2> "$d/r3.err"; rc=$?
  check "$mode: 4 ranks --resume on 4 ranks (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/r3.err"
  same=$(( rc == 0 ))
  for r in 0 1 2 3; do
    # every rank's first run + its resumed run = its uninterrupted run (the
    # lock-step end falls at the same step: the streams are the same)
    cat "$d/r1/rank-$r.samples" "$d/r3/rank-$r.samples" | cut -d' ' -f2- > "$d/cat.$r"
    cut -d' ' -f2- "$d/full/rank-$r.samples" > "$d/ref.$r"
    [[ -s "$d/r3/rank-$r.samples" ]] && cmp -s "$d/cat.$r" "$d/ref.$r" || same=0
  done
  check "$mode: 4 ranks resumed on 4: each rank's exact stream" '[[ $same -eq 1 ]]'
done

# ranks given other weights: refused by every rank, naming the parts
run -np 2 "$Z" run "${mix[@]}" --microbatch 5 --max-batches 2 : \
    -np 1 "$Z" run --data "$T/a@0.4" --data "$T/b@0.4" --data "$T/c@0.2" --seed 4 --epoch-samples 601 \
    --epochs 2 --quiet --threads 1 --microbatch 5 --max-batches 2 > "$T/w.out" 2> "$T/w.err"; rc=$?
check "other weights on one rank: every rank fails naming the mixture parts ($rc)" \
  '[[ $rc -ne 0 && $rc -ne 124 ]] && [[ $(grep -c "mixture parts" "$T/w.err") -eq 3 ]]'
run -np 2 "$Z" run "${mix[@]}" --microbatch 5 --max-batches 2 : \
    -np 1 "$Z" run "${mix[@]}" --epoch-samples 600 --microbatch 5 --max-batches 2 > "$T/w.out" 2> "$T/w.err"; rc=$?
check "another epoch_samples on one rank: every rank fails naming it ($rc)" \
  '[[ $rc -ne 0 && $rc -ne 124 ]] && [[ $(grep -c "epoch_samples differs" "$T/w.err") -eq 3 ]]'
# a state saved every N steps under MPI: rank 0 writes one job state
run -np 2 "$Z" run "${mix[@]}" --microbatch 5 --max-batches 7 --save-state "$T/p.json" --save-every 3 \
  > "$T/p.out" 2> "$T/p.err"; rc=$?
check "--save-every under MPI: one job state of 2 ranks (rc $rc)" \
  "[[ $rc -eq 0 ]] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if len(d[\"ranks\"])==2 else 1)' '$T/p.json'"
# an unwritable state path: every rank exits 1, rank 0 names the path
run -np 2 "$Z" run "${mix[@]}" --microbatch 5 --max-batches 4 --save-state "$T/no/dir/p.json" --save-every 2 \
  > "$T/u.out" 2> "$T/u.err"; rc=$?
check "unwritable job state under MPI: exit 1, the path named, no hang ($rc)" \
  '[[ $rc -eq 1 ]] && grep -q "no/dir/p.json" "$T/u.err"'

finish
