#!/usr/bin/env bash
# test_remote_faults.sh ZEPHON - every fault of the proxy (tests/net) played
# against a run: 500, 503, 429 with Retry-After, a reset mid-body, a short
# body, a slow first byte, a wrong Content-Length, corrupt bytes (caught by
# the manifest's hash and fetched again), a stall. Each run completes with
# exactly the sample ids of the run on local files, in the same order, and
# the retries are counted; a stall that never ends is a timeout error, not a
# hang; a shard whose bytes never match its hash is an error naming it.
set -u
Z=${1:?usage: test_remote_faults.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rfault

make_ds rfault 8 60
RUN="--quiet --seed 4 --threads 2 --microbatch 8"
"$Z" run "$ROOT/rfault/manifest.json" $RUN --emit-ids "$T/local" >/dev/null || bad "local run"
ids_of "$T/local/rank-0.ids" > "$T/local.ids"

manifest_with() { proxy_manifest rfault "$@" ""; } # the shards after the faults given: plain
size0=$(stat -c %s "$ROOT/rfault/shard-00000.jsonl.zst")
half=$((size0 / 2))
manifest_with "500*2" "503" "429:1" "reset:$half" "short:$half" "slowfirst:400" "badlen" "corrupt" > "$T/faulty.json"
proxy_reset
"$Z" run "$T/faulty.json" $RUN $FAST --cache-dir "$T/c1" --prefetch 100:3 --observe=60 --json \
  --emit-ids "$T/faulty" >"$T/faulty.out" 2>"$T/faulty.err"; rc=$?
check "faulty run completes (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/faulty.err"
ids_of "$T/faulty/rank-0.ids" > "$T/faulty.ids"
check "faulty run: same sample ids, same order as local" 'cmp -s "$T/local.ids" "$T/faulty.ids"'
retries=$(grep -o '"retries": *[0-9]*' "$T/faulty.out" | tail -1 | grep -o '[0-9]*$')
check "retries counted (${retries:-none}; at least 2+1+1+1+1+1)" '[[ ${retries:-0} -ge 7 ]]'
check "corrupt shard fetched again (two GETs of it)" \
  '[[ $(proxy_stats | python3 -c "import json,sys;print(json.load(sys.stdin)[\"GET\"].get(\"/rfault/shard-00007.jsonl.zst\",0))") -ge 2 ]]'
check "no temporary file left" '[[ $(ls -a "$T/c1" | grep -c "\.part") -eq 0 ]]'

# the same faults without prefetch (downloads demanded by fetch alone)
proxy_reset
"$Z" run "$T/faulty.json" $RUN $FAST --cache-dir "$T/c2" --emit-ids "$T/faulty2" >/dev/null 2>"$T/f2.err" || { bad "faulty run without prefetch"; cat "$T/f2.err"; }
ids_of "$T/faulty2/rank-0.ids" > "$T/faulty2.ids"
check "faulty run without prefetch: same ids" 'cmp -s "$T/local.ids" "$T/faulty2.ids"'

# a stall that never ends: a timeout error after the retries, not a hang
manifest_with "stall:100*0" > "$T/stall.json"
t0=$(date +%s)
timeout 60 "$Z" run "$T/stall.json" $RUN --low-speed-time 1 --retries 1 --retry-base 0.05 --cache-dir "$T/c3" \
  >"$T/stall.out" 2>&1; rc=$?
el=$(( $(date +%s) - t0 ))
check "stall: fails (rc $rc, not killed by timeout) in ${el}s" '[[ $rc -ne 0 && $rc -ne 124 && $el -lt 30 ]]'
check "stall: the message says timeout and names the shard" 'grep -qi "time" "$T/stall.out" && grep -q "shard-00000" "$T/stall.out"'

# bytes that never match the manifest's hash: detected, fetched again, then an error
manifest_with "corrupt*0" > "$T/bad.json"
"$Z" run "$T/bad.json" $RUN $FAST --cache-dir "$T/c4" >"$T/bad.out" 2>&1; rc=$?
check "always corrupt: error (rc $rc) naming the shard and the hash" \
  '[[ $rc -ne 0 ]] && grep -q "shard-00000" "$T/bad.out" && grep -qi "hash\|xxh64" "$T/bad.out"'
check "always corrupt: fetched again before failing" \
  '[[ $(proxy_stats | python3 -c "import json,sys;print(json.load(sys.stdin)[\"GET\"].get(\"/rfault/shard-00000.jsonl.zst\",0))") -ge 2 ]]'

# a corrupt file in the cache (changed on disk after its download) is detected and fetched again
"$Z" run "$HTTP/rfault/manifest.json" $RUN $FAST --cache-dir "$T/c5" --emit-ids "$T/p1" >/dev/null 2>&1 || bad "cache fill run"
f=$(ls "$T/c5" | grep "shard-00003" | head -1)
if [[ -n "$f" ]]; then
  printf 'XXXXXXXX' | dd of="$T/c5/$f" bs=1 seek=20 conv=notrunc 2>/dev/null
  "$Z" run "$HTTP/rfault/manifest.json" $RUN $FAST --cache-dir "$T/c5" --emit-ids "$T/p2" >"$T/p2.out" 2>&1 || { bad "run over a corrupted cache file"; cat "$T/p2.out"; }
  ids_of "$T/p2/rank-0.ids" > "$T/p2.ids"
  check "corrupted cache file: replaced, same ids" 'cmp -s "$T/local.ids" "$T/p2.ids"'
else
  bad "cache file of shard 3 not found"
fi
finish
