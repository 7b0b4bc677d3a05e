#!/usr/bin/env bash
# test_schedule_cli.sh ZEPHON - mixture weight schedules from a mixture
# file's "schedule" (docs/mixtures.md, "Weight schedules"):
#  1. a step (draw 400) and a linear ramp (to draw 800, steps of 100) over
#     two epochs of 1,000 draws: the --json summary lists the phases, and in
#     each phase every part is within one sample of its weight as used; the
#     whole run draws no sample twice within a part's pass (--emit-samples);
#  2. a run saved at batch 45 (draw 450, after the step) and resumed gives
#     the same batches as the run without a stop (--emit-digest);
#  3. the state resumed with another schedule (Megatron-LM #457): over both
#     runs no sample repeated or left out (each part's samples are the same
#     set as a run configured with the schedule that was followed), the new
#     weights hold from draw 450 (a phase starts there), and the per-phase
#     counts continue through the state (and `zephon state show` lists
#     them, and the parts' passes by the schedule followed);
#  4. bad schedules are refused naming the file and the field, exit 2.
set -u
Z=$(realpath "${1:?usage: test_schedule_cli.sh PATH_TO_ZEPHON}")
. "$(dirname "$0")/../testlib.sh"
export XDG_CACHE_HOME="$T/cache"

"$Z" gen --out "$T/a" --shards 4 --samples-per-shard 120 --seed 1 >/dev/null || { echo "FAIL - gen a"; exit 1; }
"$Z" gen --out "$T/b" --shards 3 --samples-per-shard 50 --seed 2 >/dev/null || { echo "FAIL - gen b"; exit 1; }
"$Z" gen --out "$T/c" --shards 2 --samples-per-shard 20 --seed 3 >/dev/null || { echo "FAIL - gen c"; exit 1; }
cd "$T" || exit 1
mix() { # mix FILE SCHEDULE_JSON
  cat > "$1" <<EOF
{"parts": [{"name": "a", "data": "a", "weight": 0.7}, {"name": "b", "data": "b", "weight": 0.2},
           {"name": "c", "data": "c", "weight": 0.1}],
 "epoch_samples": 1000, "schedule": $2}
EOF
}
mix m1.json '[{"at": 400, "weights": {"a": 0.1, "b": 0.3, "c": 0.6}},
              {"at": 800, "weights": [0.5, 0.25, 0.25], "linear": 100}]'
mix m2.json '[{"at": 300, "weights": {"a": 0.05, "b": 0.05, "c": 0.9}},
              {"at": 800, "weights": [0.5, 0.25, 0.25], "linear": 100}]'
common=(--quiet --seed 11 --microbatch 10 --threads 2 --epochs 2)

# 1. per-phase proportions; no sample twice
"$Z" run --mixture m1.json "${common[@]}" --json --emit-samples "$T/s0" --emit-digest "$T/d0.txt" \
  > "$T/j0.txt" 2> "$T/err"; rc=$?
check "a mixture file with a schedule runs (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/err"
check "--json: phases at 0, 400, 500, 600, 700, 800, each part within one sample of its weight" "python3 - '$T/j0.txt' <<'EOF'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
ph = d['phases']
assert [p['start'] for p in ph] == [0, 400, 500, 600, 700, 800], ph
assert [p['samples'] for p in ph] == [400, 100, 100, 100, 100, 1200], ph
for p in ph:
    for x in p['parts']:
        assert abs(x['samples'] - x['weight'] * p['samples']) < 1, p
# the ramp from 0.1/0.3/0.6 (draw 400) to 0.5/0.25/0.25 (draw 800), at the middle of each step
for k, p in enumerate(ph[1:5]):
    t = (k + 0.5) / 4
    assert abs(p['parts'][0]['weight'] - (0.1 + 0.4 * t)) < 1e-6, p
assert abs(ph[0]['parts'][0]['weight'] - 0.7) < 1e-12
EOF"
check "--emit-samples: 2000 draws, none twice within a part's pass" "python3 - '$T/s0/rank-0.samples' <<'EOF'
import sys
keys = [tuple(l.split()[2:4] + l.split()[5:6]) for l in open(sys.argv[1])]
assert len(keys) == 2000 and len(set(keys)) == 2000, (len(keys), len(set(keys)))
EOF"
"$Z" run --mixture m1.json "${common[@]}" > "$T/t0.txt" 2>&1
check "text summary: realized proportions per phase" \
  'grep -q "schedule: realized proportions per phase" "$T/t0.txt" && grep -q "phase 1 from draw 400: 100 samples" "$T/t0.txt"'

# 2. byte-identical resume across the change point
"$Z" run --mixture m1.json "${common[@]}" --max-batches 45 --save-state "$T/s45.json" \
  --emit-samples "$T/s1" >/dev/null 2>&1
check "the state records the schedule" 'grep -q "\"schedule\": {\"since\": 0" "$T/s45.json"'
"$Z" run --mixture m1.json "${common[@]}" --resume "$T/s45.json" --emit-digest "$T/d45.txt" \
  >/dev/null 2>"$T/err"; rc=$?
check "resumed at batch 45 (draw 450, after the step at 400): the same batches (rc $rc)" \
  '[[ $rc -eq 0 && -s "$T/d45.txt" ]] && diff -q <(tail -n +46 "$T/d0.txt") "$T/d45.txt" >/dev/null' || cat "$T/err"

# 3. resumed with another schedule
"$Z" run --mixture m2.json "${common[@]}" --resume "$T/s45.json" --json --emit-samples "$T/s2" \
  --save-state "$T/s2.json" > "$T/j2.txt" 2>"$T/err"; rc=$?
check "the state resumes with another schedule (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/err"
check "the new schedule holds from draw 450: a phase starts there with m2's ramp weights" "python3 - '$T/j2.txt' <<'EOF'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
ph = d['phases']
assert [p['start'] for p in ph] == [0, 400, 450, 500, 600, 700, 800], ph
# m2's ramp from 0.05/0.05/0.9 (draw 300) to 0.5/0.25/0.25 (800), step [400, 500): t = 0.3
assert abs(ph[2]['parts'][2]['weight'] - (0.9 - 0.65 * 0.3)) < 1e-6, ph[2]
# counts per phase carried through the state: 400 + 50 before, the rest after
assert [p['samples'] for p in ph] == [400, 50, 50, 100, 100, 100, 1200], ph
for p in ph:
    for x in p['parts']:
        assert abs(x['samples'] - x['weight'] * p['samples']) < 1, p
EOF"
check "the state after the change records the cut (since 450)" 'grep -q "\"since\": 450" "$T/s2.json"'
"$Z" state show "$T/s2.json" > "$T/show.txt" 2>&1
check "zephon state show: the schedule followed and each phase's proportions, the passes by it" \
  'grep -q "schedule (7 phases; the configured one followed from draw 450)" "$T/show.txt" && grep -q "phase 2 from draw 450: 50 samples" "$T/show.txt" && grep -q "each part.s pass at draw 2000 of the mixture: a pass 2 " "$T/show.txt"'
# the reference: the schedule that was followed, written as a mixture file
mix mref.json '[{"at": 400, "weights": {"a": 0.1, "b": 0.3, "c": 0.6}},
                {"at": 450, "weights": [0.185, 0.11, 0.705]},
                {"at": 500, "weights": [0.275, 0.15, 0.575]},
                {"at": 600, "weights": [0.365, 0.19, 0.445]},
                {"at": 700, "weights": [0.455, 0.23, 0.315]},
                {"at": 800, "weights": [0.5, 0.25, 0.25]}]'
sed -i 's/{"at": 400, "weights": {"a": 0.1, "b": 0.3, "c": 0.6}}/{"at": 400, "weights": [0.15, 0.29375, 0.55625]}/' mref.json
"$Z" run --mixture mref.json "${common[@]}" --emit-samples "$T/sref" >/dev/null 2>"$T/err"
check "no sample lost or repeated: both runs together draw the samples of the schedule followed" "python3 - '$T/s1/rank-0.samples' '$T/s2/rank-0.samples' '$T/sref/rank-0.samples' <<'EOF'
import sys, collections
def keys(f):
    return [(l.split()[2], l.split()[3], l.split()[5]) for l in open(f)]
got = keys(sys.argv[1]) + keys(sys.argv[2])
ref = keys(sys.argv[3])
assert len(got) == 2000 and len(set(got)) == 2000, (len(got), len(set(got)))
assert collections.Counter(got) == collections.Counter(ref)
EOF"

# 4. bad schedules
bad_sched() { # DESCRIPTION SCHEDULE_JSON EXPECTED_TEXT
  mix bad.json "$2"
  "$Z" run --mixture bad.json --quiet --max-batches 1 >/dev/null 2>"$T/err"; rc=$?
  want=$3
  check "$1: exit 2 naming the field ($rc: $(head -1 "$T/err"))" '[[ $rc -eq 2 ]] && grep -qF -- "$want" "$T/err"'
}
bad_sched "a phase at draw 0" '[{"at": 0, "weights": [1, 1, 1]}]' 'schedule[0].at'
bad_sched "phases out of order" '[{"at": 9, "weights": [1, 1, 1]}, {"at": 5, "weights": [1, 1, 1]}]' 'schedule[1].at = 5: must be above schedule[0].at = 9'
bad_sched "a weight missing" '[{"at": 9, "weights": {"a": 1, "b": 1}}]' "schedule[0].weights: no weight for part 'c'"
bad_sched "an unknown part" '[{"at": 9, "weights": {"a": 1, "b": 1, "c": 1, "d": 1}}]' "'d' is not a part's name"
bad_sched "a negative weight" '[{"at": 9, "weights": [1, -1, 1]}]' "part 'b' = -1"
bad_sched "an unknown field" '[{"at": 9, "weights": [1, 1, 1], "lin": 3}]' "unknown field 'lin'"
bad_sched "too few weights" '[{"at": 9, "weights": [1, 1]}]' '2 weights for 3 parts'

finish
