#!/usr/bin/env bash
# test_remote_hostile.sh ZEPHON - remote storage used the wrong way on
# purpose: SIGINT/SIGTERM during a stalled download stop the run at once
# (exit 130/143, no partial file in the cache, the next run works); one
# shard named twice in spellings that are one object is refused, and the
# message shows no credentials or query string.
set -u
Z=${1:?usage: test_remote_hostile.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rhost

make_ds rhost 4 60
RUN="--quiet --seed 5 --threads 2 --microbatch 8"
"$Z" run "$ROOT/rhost/manifest.json" $RUN --emit-ids "$T/local" >/dev/null || bad "local run"
ids_of "$T/local/rank-0.ids" > "$T/local.ids"

# manifest_via FAULT: the dataset's manifest with every shard served through
# the proxy with FAULT on each request
manifest_via() {
  python3 - "$ROOT/rhost/manifest.json" "$PROXY" "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); proxy, f = sys.argv[2], sys.argv[3]
for s in m["shards"]:
    s["name"] = s["path"]
    s["path"] = proxy + "/f/" + f + "/rhost/" + s["path"]
print(json.dumps(m))
PY
}

# --- a signal during a stalled download: the run stops within about a second
# (the stall would last 30 s before the low-speed abort). Job control on, so
# that the background run does not start with SIGINT ignored.
set -m
manifest_via "stall:2000*0" > "$T/stall.json"
# the shard itself, with no manifest: the stall is met while counting its records
stall_shard="$PROXY/f/stall:2000*0/rhost/shard-00001.jsonl.zst"
for sig in INT TERM; do
  for what in manifest shard; do
    spec="$T/stall.json"; [[ $what == shard ]] && spec=$stall_shard
    c="$T/csig-$sig-$what"
    "$Z" run "$spec" $RUN --connect-timeout 2 --low-speed-time 30 --retries 2 --prefetch 100:2 \
      --cache-dir "$c" >"$T/sig.out" 2>&1 &
    pid=$!
    sleep 1.5
    t0=$(date +%s%N)
    kill -"$sig" "$pid"
    wait "$pid"; rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [[ $sig == INT ]] && want=130 || want=143
    check "SIG$sig during a stalled download ($what): exit $want (rc $rc) within 2 s (${ms} ms)" \
      '[[ $rc -eq $want && $ms -lt 2000 ]]' || cat "$T/sig.out"
    check "SIG$sig ($what): says it was stopped, no error" \
      'grep -q "stopped by SIG$sig" "$T/sig.out" && ! grep -qi "error\|invalid state" "$T/sig.out"'
    check "SIG$sig ($what): no shard file, complete or not, left in the cache" \
      '[[ $(ls -A "$c" | grep -vc "^\.zephon-cache\.lock$") -eq 0 ]]'
  done
done
set +m
# the next run on the same cache works
"$Z" run "$HTTP/rhost/manifest.json" $RUN --cache-dir "$T/csig-INT-manifest" \
  --emit-ids "$T/after" >/dev/null 2>&1 || bad "run after the signals"
ids_of "$T/after/rank-0.ids" > "$T/after.ids" 2>/dev/null
check "run after the signals: same sample ids as local" 'cmp -s "$T/local.ids" "$T/after.ids"'

# --- one object named twice: refused, whatever the spelling; no secret shown
s0="rhost/shard-00000.jsonl.zst"
hp=${HTTP#http://}
for twin in "$HTTP/rhost/./shard-00000.jsonl.zst" "$HTTP/rhost/x/../shard-00000.jsonl.zst" \
            "$HTTP/rhost/shard-0000%30.jsonl.zst" "HTTP://$hp/$s0?sig=1" \
            "http://user:hunter2@$hp/$s0?X-Amz-Signature=deadbeef"; do
  "$Z" run "$HTTP/$s0" "$twin" $RUN --cache-dir "$T/cdup" >"$T/dup.out" 2>&1; rc=$?
  check "same shard twice ($twin): refused (rc $rc)" \
    '[[ $rc -eq 1 ]] && grep -q "is the same file as" "$T/dup.out"'
  check "same shard twice ($twin): no secret in the message" \
    '! grep -q "hunter2\|deadbeef\|sig=1" "$T/dup.out"'
done

finish
