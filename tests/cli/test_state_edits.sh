#!/usr/bin/env bash
# test_state_edits.sh ZEPHON - hand-edited states that contradict
# themselves are refused by --resume naming the field (and `zephon state
# show` says why), where they were accepted before: a top-level seed other
# than the settings' seed, a part renamed in one place, plan spans that
# overlap (every sample twice) or leave a rank short, a carried token offset
# in record mode. The unedited state resumes.
set -u
Z=$(realpath "${1:?usage: test_state_edits.sh PATH_TO_ZEPHON}")
. "$(dirname "$0")/../testlib.sh"
export XDG_CACHE_HOME="$T/cache"

"$Z" gen --out "$T/a" --shards 2 --samples-per-shard 50 --seed 1 >/dev/null || { echo "FAIL - gen"; exit 1; }
"$Z" gen --out "$T/b" --shards 2 --samples-per-shard 30 --seed 2 >/dev/null || { echo "FAIL - gen"; exit 1; }
args=(--data "$T/a@0.7" --data "$T/b@0.3" --microbatch 4 --quiet)
"$Z" run "${args[@]}" --max-batches 5 --save-state "$T/s.json" >/dev/null 2>"$T/err"; rc=$?
check "a state saved (rc $rc)" '[[ $rc -eq 0 && -s "$T/s.json" ]]' || cat "$T/err"
"$Z" run "${args[@]}" --resume "$T/s.json" --max-batches 2 >/dev/null 2>"$T/err"; rc=$?
check "the unedited state resumes (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/err"

# edit FILE PYTHON: d is the state, edited in place
edit() { python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(d, open(sys.argv[1], "w"), indent=1)
PY
}
refused() { # NAME PYTHON EXPECTED
  want=$3
  cp "$T/s.json" "$T/e.json"; edit "$T/e.json" "$2"
  "$Z" run "${args[@]}" --resume "$T/e.json" >/dev/null 2>"$T/err"; rc=$?
  check "$1: --resume refused (rc $rc) naming it" '[[ $rc -eq 1 ]] && grep -qF -- "$want" "$T/err"' || cat "$T/err"
  "$Z" state show "$T/e.json" >"$T/out" 2>&1
  check "$1: state show says a resume refuses it" 'grep -qF -- "a resume refuses this state: $want" "$T/out"'
}
refused "a top-level seed edited" 'd["seed"] = 5' "seed: 5, but the settings' seed is 0"
refused "a part renamed in parts only" 'd["parts"][1]["name"] = "c"' 'parts[1].name: "c", but the settings name part 1'
refused "plan spans that overlap" 'd["ranks"][0]["plans"] = [{"epoch": 0, "spans": [[0, 100], [50, 60]]}]' \
  "ranks[0].plans[0].spans[1]: positions 50..109 overlap ranks[0].plans[0].spans[0] (0..99)"
refused "a token offset in record mode" 'd["ranks"][0]["token_offset"] = 3' \
  "ranks[0].token_offset: a document carried over, but the settings pack no token stream"
refused "the part counts against the sample count" 'd["ranks"][0]["part_samples"][0] += 1' \
  "ranks[0].part_samples: 21 samples over the parts, but counts.samples is 20"
finish
