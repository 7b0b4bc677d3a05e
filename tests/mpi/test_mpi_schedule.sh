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
#     the phase from 500 has the new schedule's weights.
set -u
Z=$(realpath "${1:?usage: test_mpi_schedule.sh ZEPHON MPIRUN}")
MPIRUN=${2:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
. "$(dirname "$0")/../testlib.sh"
export XDG_CACHE_HOME="$T/cache"
run() { timeout 120 "$MPIRUN" --oversubscribe --bind-to none "$@"; }

"$Z" gen --out "$T/a" --shards 4 --samples-per-shard 80 --seed 1 >/dev/null || { echo "FAIL - gen a"; exit 1; }
"$Z" gen --out "$T/b" --shards 3 --samples-per-shard 40 --seed 2 >/dev/null || { echo "FAIL - gen b"; exit 1; }
"$Z" gen --out "$T/c" --shards 2 --samples-per-shard 20 --seed 3 >/dev/null || { echo "FAIL - gen c"; exit 1; }
mixfile() { # FILE SCHEDULE_JSON
  cat > "$1" <<EOF
{"parts": [{"name": "a", "data": "$T/a", "weight": 0.5}, {"name": "b", "data": "$T/b", "weight": 0.3},
           {"name": "c", "data": "$T/c", "weight": 0.2}],
 "epoch_samples": 600, "schedule": $2}
EOF
}
mixfile "$T/m1.json" '[{"at": 300, "weights": [0.1, 0.3, 0.6]}, {"at": 900, "weights": [0.6, 0.2, 0.2], "linear": 100}]'
mixfile "$T/m2.json" '[{"at": 200, "weights": [0.8, 0.1, 0.1]}, {"at": 1000, "weights": [0.2, 0.2, 0.6]}]'
args=(--seed 4 --epochs 2 --quiet --threads 1 --microbatch 5)

# Every non-padded draw (epoch part pass shard:record) of the --emit-samples
# folders given, sorted; a draw listed twice shows twice.
draws() { cat "$@" | awk '$5 == 0 {print $2, $3, $4, $6}' | sort; }

run -np 4 "$Z" run --mixture "$T/m1.json" "${args[@]}" --emit-samples "$T/full" > "$T/full.out" 2> "$T/full.err"; rc=$?
check "the uninterrupted 4-rank run (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$T/full.err"
draws "$T"/full/rank-*.samples > "$T/full.draws"
check "it delivers the 1200 draws of both epochs once each" \
  '[[ $(wc -l < "$T/full.draws") -eq 1200 && $(uniq -d "$T/full.draws" | wc -l) -eq 0 ]]'

# 1. 4 ranks, 10 steps (50 draws each), the job state; 3 ranks resume it
run -np 4 "$Z" run --mixture "$T/m1.json" "${args[@]}" --max-batches 10 --save-state "$T/s.json" \
  --emit-samples "$T/r1" > "$T/r1.out" 2> "$T/r1.err"; rc=$?
check "4 ranks, 10 steps, --save-state (rc $rc)" '[[ $rc -eq 0 && -s "$T/s.json" ]]' || tail -5 "$T/r1.err"
check "the job state records the schedule" 'grep -q "\"schedule\": {\"since\": 0" "$T/s.json"'
run -np 3 "$Z" run --mixture "$T/m1.json" "${args[@]}" --resume "$T/s.json" --emit-samples "$T/r2" \
  > "$T/r2.out" 2> "$T/r2.err"; rc=$?
check "3 ranks --resume the 4 ranks' state (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$T/r2.err"
draws "$T"/r1/rank-*.samples "$T"/r2/rank-*.samples > "$T/both.draws"
check "4 ranks then 3: every draw of both epochs once, as the uninterrupted run ($(wc -l < "$T/both.draws"), $(uniq -d "$T/both.draws" | wc -l) repeated)" \
  'cmp -s "$T/both.draws" "$T/full.draws"'
run -np 4 "$Z" run --mixture "$T/m1.json" "${args[@]}" --resume "$T/s.json" --emit-samples "$T/r3" \
  > "$T/r3.out" 2> "$T/r3.err"; rc=$?
same=$(( rc == 0 ))
for r in 0 1 2 3; do
  cat "$T/r1/rank-$r.samples" "$T/r3/rank-$r.samples" | cut -d' ' -f2- > "$T/cat.$r"
  cut -d' ' -f2- "$T/full/rank-$r.samples" > "$T/ref.$r"
  [[ -s "$T/r3/rank-$r.samples" ]] && cmp -s "$T/cat.$r" "$T/ref.$r" || same=0
done
check "4 ranks resumed on 4: each rank's exact stream across the change points (rc $rc)" '[[ $same -eq 1 ]]'

# 2. 3 ranks resume it with another schedule
run -np 3 "$Z" run --mixture "$T/m2.json" "${args[@]}" --resume "$T/s.json" --emit-samples "$T/r4" \
  --save-state "$T/s4.json" > "$T/r4.out" 2> "$T/r4.err"; rc=$?
check "3 ranks --resume the state with another schedule (rc $rc)" '[[ $rc -eq 0 && -s "$T/s4.json" ]]' || tail -5 "$T/r4.err"
check "the schedule followed: m1's phases before draw 500, m2's from 500 (0.8/0.1/0.1 restarted there)" \
  "python3 - '$T/s4.json' <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))['schedule']
assert s['since'] == 500, s
starts = [p[0] for p in s['phases']]
assert starts == [0, 300, 400, 500, 1000], starts
assert s['phases'][3][1] == [8, 1, 1], s['phases'][3]
assert s['phases'][4][1] == [1, 1, 3], s['phases'][4]
EOF"
# the reference: the schedule followed, as a configuration (its integer weights)
python3 - "$T/s4.json" "$T/mref.json" "$T" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))['schedule']['phases']
parts = [{"name": n, "data": f"{sys.argv[3]}/{n}", "weight": w} for n, w in zip("abc", s[0][1])]
json.dump({"parts": parts, "epoch_samples": 600,
           "schedule": [{"at": at, "weights": w} for at, w in s[1:]]}, open(sys.argv[2], "w"))
EOF
run -np 4 "$Z" run --mixture "$T/mref.json" "${args[@]}" --emit-samples "$T/ref" > "$T/ref.out" 2> "$T/ref.err"; rc=$?
draws "$T"/ref/rank-*.samples > "$T/ref.draws"
draws "$T"/r1/rank-*.samples "$T"/r4/rank-*.samples > "$T/new.draws"
check "no draw twice over both runs ($(uniq -d "$T/new.draws" | wc -l) repeated)" \
  '[[ $(uniq -d "$T/new.draws" | wc -l) -eq 0 ]]'
check "no draw lost: both runs deliver the draws of the schedule followed ($(wc -l < "$T/new.draws") of $(wc -l < "$T/ref.draws"), rc $rc)" \
  '[[ $rc -eq 0 && -s "$T/ref.draws" ]] && cmp -s "$T/new.draws" "$T/ref.draws"'
check "the draws differ from the old schedule's (the new weights took effect)" \
  '! cmp -s "$T/new.draws" "$T/full.draws"'

finish
