#!/usr/bin/env bash
# test_mpi_schedule.sh ZEPHON MPIRUN - mixture weight schedules under mpirun
# (docs/mixtures.md, "Weight schedules"): a 3-part mixture file whose
# weights change at draw 300 (a step) and then move linearly to draw 900
# (steps of 100), two epochs of 600 draws.
#  1. 4 ranks run 10 steps and write the job state; 3 ranks resume it
#     (elastic resume across the change points): over both runs every draw
#     of both epochs exactly once, the same draws as an uninterrupted
#     4-rank run; 4 ranks resuming it continue each rank's exact stream.
#  2. 3 ranks resume the same state with another schedule (Megatron-LM
#     #457): over both runs no draw twice and none left out: the draws are
#     exactly those of an uninterrupted run configured with the schedule
#     the job followed (the state's phases: the old ones before the draw
#     past everything the 4 ranks delivered, 500, the new ones after), and
#     the phase from 500 has the new schedule's weights (the schedule is
#     read from the job state that the resumed run saves every 50 steps).
#  3. a rank started with another schedule stops every rank (the startup
#     agreement hashes the schedule's phases).
# 1 and 2 in record mode and with token concat packing (documents cut by the save
# continue from their token offsets; the cut counts them as delivered).
set -u
Z=$(realpath "${1:?usage: test_mpi_schedule.sh ZEPHON MPIRUN}")
MPIRUN=${2:-mpirun}
. "$(dirname "$0")/mpilib.sh"

gen_parts
mixfile() { # FILE SCHEDULE_JSON
  cat > "$1" <<EOF
{"parts": [{"name": "a", "data": "$T/a", "weight": 0.5}, {"name": "b", "data": "$T/b", "weight": 0.3},
           {"name": "c", "data": "$T/c", "weight": 0.2}],
 "epoch_samples": 600, "schedule": $2}
EOF
}
mixfile "$T/m1.json" '[{"at": 300, "weights": [0.1, 0.3, 0.6]}, {"at": 900, "weights": [0.6, 0.2, 0.2], "linear": 100}]'
mixfile "$T/m2.json" '[{"at": 200, "weights": [0.8, 0.1, 0.1]}, {"at": 1000, "weights": [0.2, 0.2, 0.6]}]'
args=(--seed 4 --epochs 2 --quiet --threads 1)

# Every non-padded draw (epoch part pass shard:record) of the --emit-samples
# folders given, sorted; a draw listed twice shows twice.
# EPF: only that epoch's (token modes: the last epoch's end is not in lock
# step, so its tail is not delivered; epoch 0 holds every change point).
draws() { cat "$@" | awk -v e="$EPF" '$5 == 0 && (e == "" || $2 == e) {print $2, $3, $4, $6}' | sort; }

for mode in rec tok; do
  if [[ $mode == rec ]]; then
    margs=("${args[@]}" --microbatch 5); EPF=; want=1200
  else
    margs=("${args[@]}" --tokenize gpt2:1 --pack concat --seq-len 127 --microbatch 2); EPF=0; want=600
  fi
  d="$T/$mode"; mkdir -p "$d"
  run -np 4 "$Z" run --mixture "$T/m1.json" "${margs[@]}" --emit-samples "$d/full" > "$d/full.out" 2> "$d/full.err"; rc=$?
  check "$mode: the uninterrupted 4-rank run (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/full.err"
  draws "$d"/full/rank-*.samples > "$d/full.draws"
  check "$mode: it delivers the $want draws of both epochs (tok: of epoch 0) once each" \
    '[[ $(wc -l < "$d/full.draws") -eq $want && $(uniq -d "$d/full.draws" | wc -l) -eq 0 ]]'

  # 1. 4 ranks, 10 steps, the job state; 3 ranks resume it
  run -np 4 "$Z" run --mixture "$T/m1.json" "${margs[@]}" --max-batches 10 --save-state "$d/s.json" \
    --emit-samples "$d/r1" > "$d/r1.out" 2> "$d/r1.err"; rc=$?
  check "$mode: 4 ranks, 10 steps, --save-state (rc $rc)" '[[ $rc -eq 0 && -s "$d/s.json" ]]' || tail -5 "$d/r1.err"
  check "$mode: the job state records the schedule" 'grep -q "\"schedule\": {\"since\": 0" "$d/s.json"'
  run -np 3 "$Z" run --mixture "$T/m1.json" "${margs[@]}" --resume "$d/s.json" --emit-samples "$d/r2" \
    > "$d/r2.out" 2> "$d/r2.err"; rc=$?
  check "$mode: 3 ranks --resume the 4 ranks' state (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/r2.err"
  draws "$d"/r1/rank-*.samples "$d"/r2/rank-*.samples > "$d/both.draws"
  check "$mode: 4 ranks then 3: every draw once, as the uninterrupted run ($(wc -l < "$d/both.draws"), $(uniq -d "$d/both.draws" | wc -l) repeated)" \
    'cmp -s "$d/both.draws" "$d/full.draws"'
  run -np 4 "$Z" run --mixture "$T/m1.json" "${margs[@]}" --resume "$d/s.json" --emit-samples "$d/r3" \
    > "$d/r3.out" 2> "$d/r3.err"; rc=$?
  same=$(( rc == 0 ))
  for r in 0 1 2 3; do
    cat "$d/r1/rank-$r.samples" "$d/r3/rank-$r.samples" | cut -d' ' -f2- > "$d/cat.$r"
    cut -d' ' -f2- "$d/full/rank-$r.samples" > "$d/ref.$r"
    [[ -s "$d/r3/rank-$r.samples" ]] && cmp -s "$d/cat.$r" "$d/ref.$r" || same=0
done
check "$mode: 4 ranks resumed on 4: each rank's exact stream across the change points (rc $rc)" '[[ $same -eq 1 ]]'

# 2. 3 ranks resume it with another schedule
run -np 3 "$Z" run --mixture "$T/m2.json" "${margs[@]}" --resume "$d/s.json" --emit-samples "$d/r4" \
  --save-state "$d/s4.json" --save-every 50 > "$d/r4.out" 2> "$d/r4.err"; rc=$?
check "$mode: 3 ranks --resume the state with another schedule (rc $rc)" '[[ $rc -eq 0 && -s "$d/s4.json" ]]' || tail -5 "$d/r4.err"
check "$mode: the schedule followed: m1's phases before the cut (500 with records), m2's from there (0.8/0.1/0.1 restarted)" \
  "python3 - '$d/s4.json' <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))['schedule']
C = s['since']  # past rank 3's delivered draws: in its range [450, 600)
assert 450 < C <= 600, s
starts = [p[0] for p in s['phases']]
old = [x for x in (0, 300, 400, 500, 600, 700, 800) if x < C]
assert starts == old + [C, 1000], starts
assert s['phases'][len(old)][1] == [8, 1, 1], s['phases']
assert s['phases'][-1][1] == [1, 1, 3], s['phases']
EOF"
# the reference: the schedule followed, as a configuration (its integer weights)
python3 - "$d/s4.json" "$d/mref.json" "$T" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))['schedule']['phases']
parts = [{"name": n, "data": f"{sys.argv[3]}/{n}", "weight": w} for n, w in zip("abc", s[0][1])]
json.dump({"parts": parts, "epoch_samples": 600,
           "schedule": [{"at": at, "weights": w} for at, w in s[1:]]}, open(sys.argv[2], "w"))
EOF
# (in record mode: the draws do not depend on the packing)
run -np 4 "$Z" run --mixture "$d/mref.json" "${args[@]}" --microbatch 5 --emit-samples "$d/ref" > "$d/ref.out" 2> "$d/ref.err"; rc=$?
draws "$d"/ref/rank-*.samples > "$d/ref.draws"
draws "$d"/r1/rank-*.samples "$d"/r4/rank-*.samples > "$d/new.draws"
check "$mode: no draw twice over both runs ($(uniq -d "$d/new.draws" | wc -l) repeated)" \
  '[[ $(uniq -d "$d/new.draws" | wc -l) -eq 0 ]]'
check "$mode: no draw lost: both runs deliver the draws of the schedule followed ($(wc -l < "$d/new.draws") of $(wc -l < "$d/ref.draws"), rc $rc)" \
  '[[ $rc -eq 0 && -s "$d/ref.draws" ]] && cmp -s "$d/new.draws" "$d/ref.draws"'
check "$mode: the draws differ from the old schedule's (the new weights took effect)" \
  '! cmp -s "$d/new.draws" "$d/full.draws"'

done

# ranks given other schedules: refused by the startup agreement, on every rank
run -np 2 "$Z" run --mixture "$T/m1.json" "${args[@]}" --microbatch 5 --max-batches 2 : \
    -np 1 "$Z" run --mixture "$T/m2.json" "${args[@]}" --microbatch 5 --max-batches 2 > "$T/w.out" 2> "$T/w.err"; rc=$?
check "another schedule on one rank: every rank fails naming the mixture's schedule ($rc)" \
  '[[ $rc -ne 0 && $rc -ne 124 ]] && [[ $(grep -c "weight schedule" "$T/w.err") -eq 3 ]]' || head -3 "$T/w.err"

finish
