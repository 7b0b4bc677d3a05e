#!/usr/bin/env bash
# test_remote_secrets.sh ZEPHON - credentials and signed query strings
# never reach an output (docs/storage.md, "Secrets"). A secret (user and
# password, X-Amz-Signature, X-Amz-Credential, token=) is planted in every
# kind of spec: a dataset URL, a manifest URL, --data URL@WEIGHT, a
# mixture file's parts, and manifest entries that are fine or have each
# bad field (format, suffix, bytes, samples, xxh64, name); every stream and
# file the runs write (stdout, stderr, --json, --metrics-out, --save-state,
# --report text/JSON/CSV/HTML, zephon state show, zephon index) is grepped
# for it (and the --emit-ids/--emit-samples/--emit-digest files). Each
# run's expected outcome is checked too, so that a run that
# failed early cannot pass by writing nothing.
set -u
Z=${1:?usage: test_remote_secrets.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rsec
SECRET='zpuser7|zppass7|zpsig7|zpcred7|zptok7'
O=$T/out   # everything the runs write (streams and files) goes here
I=$T/in    # inputs written by this test (they hold the secrets)
mkdir -p "$O" "$I"
make_ds rsec 4 40
hp=${HTTP#http://}
Q='X-Amz-Signature=zpsig7abc&X-Amz-Credential=zpcred7%2F20250101&token=zptok7'
# sec PATH: the URL of PATH under $ROOT with credentials and a signed query
sec() { echo "http://zpuser7:zppass7@$hp/$1?$Q"; }
REPORT=0
"$Z" run --help 2>&1 | grep -q -- "--report" && REPORT=1
RUN=(--seed 5 --threads 2 --microbatch 8 --cache-dir "$T/cache")
n=0
# go NAME EXPECTED_RC ARGS...: run zephon with ARGS, streams into $O/NAME.out
# and $O/NAME.err; checks the exit status
go() {
  local name=$1 want=$2; shift 2
  "$Z" "$@" >"$O/$name.out" 2>"$O/$name.err"
  local rc=$?
  n=$((n + 1))
  check "$name: exit $want (rc $rc)" '[[ $rc -eq $want ]]' || cat "$O/$name.err"
}
rep() { [[ $REPORT -eq 1 ]] && echo --report "$O/$1.rep"; }

# --- a dataset URL (a manifest) with every output
go murl 0 run "$(sec rsec/manifest.json)" "${RUN[@]}" --observe --metrics-out "$O/murl.metrics.json" \
  --save-state "$O/murl.state.json" --emit-ids "$O/murl.ids" --emit-digest "$O/murl.digest" $(rep murl)
go murl-json 0 run "$(sec rsec/manifest.json)" "${RUN[@]}" --json --metrics-out "$O/murl-json.metrics.json" \
  $(rep murl-json)
check "murl: the summary names the dataset redacted" \
  '[[ $REPORT -eq 0 ]] || grep -q "rsec/manifest.json?<redacted>" "$O/murl.rep/report.txt"'
# one shard as a URL
go shard 0 run "$(sec rsec/shard-00000.jsonl.zst)" "${RUN[@]}" --json --metrics-out "$O/shard.metrics.json" \
  --save-state "$O/shard.state.json" $(rep shard)

# --- --data URL@WEIGHT: the parts' names in the summary, --json, the state,
# the metrics and the report; resumed from its own state (the names are
# the same at each run); zephon state show
D=(--data "$(sec rsec/shard-00000.jsonl.zst)@1" --data "$(sec rsec/shard-00001.jsonl.zst)@3")
go data 0 run "${D[@]}" "${RUN[@]}" --max-batches 6 --metrics-out "$O/data.metrics.json" \
  --save-state "$O/data.state.json" --emit-samples "$O/data.samples" $(rep data)
check "data: the summary lists both parts, redacted" \
  '[[ $(grep -c "shard-0000[01].jsonl.zst?<redacted>" "$O/data.out") -ge 2 ]]'
go data-json 0 run "${D[@]}" "${RUN[@]}" --max-batches 6 --json --save-state "$O/data-json.state.json"
go data-resume 0 run "${D[@]}" "${RUN[@]}" --resume "$O/data.state.json" --json \
  --save-state "$O/data-resume.state.json" --metrics-out "$O/data-resume.metrics.json"
go data-show 0 state show "$O/data.state.json"
check "state show lists the parts, redacted" \
  'grep -q "shard-00001.jsonl.zst?<redacted>" "$O/data-show.out"'
# a bad weight and a weight-less spec that does not exist
go data-badw 2 run --data "$(sec rsec/shard-00000.jsonl.zst)@-1" "${RUN[@]}"
go data-positional 2 run --data "$(sec rsec/shard-00000.jsonl.zst)@1" "$(sec rsec/shard-00001.jsonl.zst)" \
  "${RUN[@]}"
go data-nofile 1 run --data "$(sec rsec/nothing.jsonl)@2" --data "$(sec rsec/shard-00001.jsonl.zst)" \
  "${RUN[@]}" --connect-timeout 2 --retries 0

# --- a mixture file: unnamed parts of one URL and of a list of URLs
cat > "$I/mix.json" <<EOF
{"parts": [{"data": "$(sec rsec/shard-00002.jsonl.zst)", "weight": 1},
           {"data": ["$(sec rsec/shard-00000.jsonl.zst)", "$(sec rsec/shard-00003.jsonl.zst)"],
            "weight": 2}]}
EOF
go mix 0 run --mixture "$I/mix.json" "${RUN[@]}" --max-batches 6 --metrics-out "$O/mix.metrics.json" \
  --save-state "$O/mix.state.json" $(rep mix)
go mix-json 0 run --mixture "$I/mix.json" "${RUN[@]}" --max-batches 6 --json
go mix-show 0 state show "$O/mix.state.json"
cat > "$I/mixbad.json" <<EOF
{"parts": [{"data": "$(sec rsec/shard-00002.jsonl.zst)", "weight": -2}]}
EOF
go mix-bad 2 run --mixture "$I/mixbad.json" "${RUN[@]}"

# --- manifests that list URLs with secrets: fine, then each field bad. Each
# manifest is read from a file and from the server (a remote manifest).
manifest() {  # manifest NAME ENTRY_JSON: $I/NAME.json and $ROOT/rsec/NAME.json
  python3 - "$ROOT/rsec/manifest.json" "$(sec rsec/)" "$2" > "$I/$1.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); base = sys.argv[2]; patch = json.loads(sys.argv[3])
for s in m["shards"]:
    s["path"] = base.replace("/?", "/" + s["path"] + "?")
m["shards"][1].update(patch)
m["shards"][1] = {k: v for k, v in m["shards"][1].items() if v is not None}
print(json.dumps(m))
PY
  cp "$I/$1.json" "$ROOT/rsec/$1.json"
}
manifest good '{}'
go man-good 0 run "$I/good.json" "${RUN[@]}" --json --metrics-out "$O/man-good.metrics.json" \
  --save-state "$O/man-good.state.json" $(rep man-good)
# zephon index: -v prints each shard; -o writes the URLs as given (the
# data asked for: docs/storage.md), so its manifest goes with the inputs
go man-index 0 index -v "${RUN[@]:6}" -o "$I/idx.json" "$I/good.json"
go man-index-url 0 index -v "${RUN[@]:6}" -o "$I/idx-url.json" "$(sec rsec/good.json)"
for bad in 'format:{"format": "nope"}' 'formattype:{"format": 7}' \
           'suffix:{"path": "'"$(sec rsec/shard-00001.bin2)"'", "format": null}' \
           'bytes:{"bytes": -1}' 'samples:{"samples": "many"}' 'xxh64:{"xxh64": "zz"}' \
           'name:{"name": ""}' 'stale:{"bytes": 12}' 'hash:{"xxh64": "0123456789abcdef"}' \
           'count:{"samples": 3}'; do
  what=${bad%%:*}
  manifest "bad-$what" "${bad#*:}"
  # stale, hash and count are found when the shard is read
  want=1
  go "man-$what" $want run "$I/bad-$what.json" "${RUN[@]}" --retries 0
  go "man-$what-url" $want run "$(sec "rsec/bad-$what.json")" "${RUN[@]}" --retries 0
  check "man-$what: the message names the shard, redacted" \
    'grep -q "<redacted>" "$O/man-$what.err" "$O/man-$what-url.err"' || cat "$O/man-$what.err"
done

# --- every stream and file written, and the cache's names
ls -R "$T/cache" > "$O/cache.listing" 2>&1
check "the runs wrote their outputs ($n runs, $(find "$O" -type f | wc -l) files)" \
  '[[ -s "$O/murl.state.json" && -s "$O/data.state.json" && -s "$O/mix.metrics.json" &&
     ( $REPORT -eq 0 || ( -s "$O/murl.rep/report.html" && -s "$O/data.rep/report.csv" ) ) ]]'
leaks=$(grep -rlE "$SECRET" "$O")
check "no output holds a secret" '[[ -z "$leaks" ]]'
for f in $leaks; do
  echo "  ${f#"$O"/}: $(grep -oE ".{0,60}($SECRET).{0,20}" "$f" | head -n 2 | tr '\n' ' ')"
done
# the test's own grep finds a planted secret (it can fail)
echo "planted zppass7" > "$O/planted"
check "the grep finds a planted secret" 'grep -rqlE "$SECRET" "$O"'
rm -f "$O/planted"
finish
