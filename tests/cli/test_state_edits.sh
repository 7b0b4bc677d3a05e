#!/usr/bin/env bash
# test_state_edits.sh ZEPHON - hand-edited states that contradict
# themselves are refused by --resume naming the field (and `zephon state
# show` says why), where they were accepted before: a top-level seed other
# than the settings' seed, a part renamed in one place, plan spans that
# overlap (every sample twice) or leave a rank short, a carried token offset
# in record mode; a carried token offset beyond its document (concat). The
# unedited state resumes.
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

# A token offset beyond the carried document (concat packing): the state
# cannot tell the document's length, the resume can; it was clamped
# silently. Both the rank's token_offset and a plan span's.
tok=(--data "$T/a@0.7" --data "$T/b@0.3" --tokenize gpt2:1 --pack concat --seq-len 31 --microbatch 2 --quiet)
"$Z" run "${tok[@]}" --max-batches 3 --save-state "$T/t.json" >/dev/null 2>"$T/err"; rc=$?
off=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ranks'][0]['token_offset'])" "$T/t.json")
check "a concat state saved mid-document (rc $rc, token_offset $off)" '[[ $rc -eq 0 && $off -gt 0 ]]' || cat "$T/err"
cp "$T/t.json" "$T/te.json"; edit "$T/te.json" 'd["ranks"][0]["token_offset"] = 99999'
"$Z" run "${tok[@]}" --resume "$T/te.json" --max-batches 2 >/dev/null 2>"$T/err"; rc=$?
check "token_offset 99999 past the carried document: refused, exit 1, naming the field, the document and its length ($rc)" \
  '[[ $rc -eq 1 ]] && grep -Eq "state: token_offset = 99999 for the document at epoch 0, position [0-9]+ \(.shard-[0-9]+.jsonl.zst. record [0-9]+\), which has [0-9]+ tokens" "$T/err"' || cat "$T/err"
n=$(grep -Eo "which has [0-9]+ tokens" "$T/err" | grep -Eo "[0-9]+")
cp "$T/t.json" "$T/te.json"; edit "$T/te.json" "d['ranks'][0]['token_offset'] = ${n:-0}"
"$Z" run "${tok[@]}" --resume "$T/te.json" --max-batches 2 >/dev/null 2>"$T/err"; rc=$?
check "token_offset = the document's length (only its EOT left) resumes ($rc)" '[[ -n "$n" && $rc -eq 0 ]]' || cat "$T/err"
cp "$T/t.json" "$T/te.json"; edit "$T/te.json" "d['ranks'][0]['token_offset'] = ${n:-0} + 1"
"$Z" run "${tok[@]}" --resume "$T/te.json" --max-batches 2 >/dev/null 2>"$T/err"; rc=$?
check "token_offset = the document's length + 1: refused ($rc)" '[[ $rc -eq 1 ]] && grep -q "token_offset = $((${n:-0} + 1)) " "$T/err"'
# a plan span's token offset (an elastic resume's carried document) past
# its document: the batches of epoch 0 come first, then the error
ep=("${tok[@]}" --epochs 2 --epoch-samples 20)
"$Z" run "${ep[@]}" --max-batches 3 --save-state "$T/t2.json" >/dev/null 2>&1
cp "$T/t2.json" "$T/te.json"; edit "$T/te.json" 'd["ranks"][0]["plans"] = [{"epoch": 1, "spans": [[0, 20, 99999]]}]'
"$Z" run "${ep[@]}" --resume "$T/te.json" --emit-digest "$T/te.dig" >/dev/null 2>"$T/err"; rc=$?
check "a plan span's token_offset past its document: refused at epoch 1, after epoch 0's batches ($rc)" \
  '[[ $rc -eq 1 && $(wc -l < "$T/te.dig") -gt 10 ]] && grep -Eq "state: a plan span.s token_offset = 99999 for the document at epoch 1, position 0 .*which has [0-9]+ tokens" "$T/err"' || cat "$T/err"
finish
