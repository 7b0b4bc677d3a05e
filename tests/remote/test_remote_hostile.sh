#!/usr/bin/env bash
# test_remote_hostile.sh ZEPHON - remote storage used the wrong way on
# purpose: SIGINT/SIGTERM during a stalled download stop the run at once
# (exit 130/143, no partial file in the cache, the next run works); one
# shard named twice in spellings that are one object is refused, and the
# message shows no credentials or query string; a download whose lease was
# taken over while its process was paused is not an error (the run uses the
# other process's file).
set -u
Z=${1:?usage: test_remote_hostile.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rhost
# checkv FILE DESCRIPTION 'CONDITION': check, and show FILE when it failed
checkv() { local f=$fails; check "$2" "$3"; [[ $fails -eq $f ]] || cat "$1"; }

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

# until_lock DIR: wait (5 s at most) until a download's lock file is in DIR
until_lock() {
  for _ in $(seq 100); do ls "$1" 2>/dev/null | grep -q "\.zdc\.lock$" && return 0; sleep 0.05; done
  return 1
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
    until_lock "$c"  # the download has started (and stalls)
    sleep 0.5
    t0=$(date +%s%N)
    kill -"$sig" "$pid"
    wait "$pid"; rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [[ $sig == INT ]] && want=130 || want=143
    checkv "$T/sig.out" "SIG$sig during a stalled download ($what): exit $want (rc $rc) within 2 s (${ms} ms)" \
      '[[ $rc -eq $want && $ms -lt 2000 ]]'
    check "SIG$sig ($what): says it was stopped, no error" \
      'grep -q "stopped by SIG$sig" "$T/sig.out" && ! grep -qi "error\|invalid state" "$T/sig.out"'
    check "SIG$sig ($what): no shard file, complete or not, left in the cache" \
      '[[ $(ls -A "$c" | grep -v "^\.zephon-throttle-" | grep -vc "^\.zephon-cache\.lock$") -eq 0 ]]'
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

# --- secrets in the shards' URLs (user:password, a signed query string)
# appear in no output: stderr, stdout (--json, --observe), --metrics-out,
# --emit-ids, --emit-digest
python3 - "$ROOT/rhost/manifest.json" "$hp" > "$T/secret.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for s in m["shards"]:
    s["path"] = "http://user:hunter2@%s/rhost/%s?X-Amz-Signature=deadbeef" % (sys.argv[2], s["path"])
print(json.dumps(m))
PY
"$Z" run "$T/secret.json" $RUN --prefetch 100:2 --observe=1 --json --metrics-out "$T/sec-metrics.json" \
  --emit-ids "$T/sec-ids" --emit-digest "$T/sec-digest" --cache-dir "$T/csec" >"$T/sec.out" 2>&1; rc=$?
checkv "$T/sec.out" "URLs with secrets: the run completes (rc $rc)" '[[ $rc -eq 0 ]]'
check "URLs with secrets: none in stdout/stderr, metrics, ids, digest, cache names" \
  '! grep -rq "hunter2\|deadbeef" "$T/sec.out" "$T/sec-metrics.json" "$T/sec-ids" "$T/sec-digest" &&
   ! ls "$T/csec" | grep -q "hunter2\|deadbeef"'

# --- a server that refuses HEAD but serves GET (a URL presigned for GET: S3
# answers HEAD 403): the size comes from a GET of the first byte; a 403 on
# every request still fails with its status
proxy_reset
"$Z" run "$PROXY/f/403/$s0" $RUN --cache-dir "$T/chead" --emit-ids "$T/head" >"$T/head.out" 2>&1; rc=$?
checkv "$T/head.out" "HEAD refused (403), GET served: the run completes (rc $rc)" '[[ $rc -eq 0 ]]'
check "HEAD refused: the shard's 60 samples delivered" '[[ $(wc -l < "$T/head/rank-0.ids") -eq 60 ]]'
"$Z" run "$PROXY/f/403*0/$s0" $RUN --cache-dir "$T/chead" >"$T/head2.out" 2>&1; rc=$?
check "403 on HEAD and GET: fails with its status (rc $rc)" '[[ $rc -eq 1 ]] && grep -q "HTTP 403" "$T/head2.out"'

# --- a typo in the scheme: the spec is a local path that does not exist; the
# message says which schemes are URLs and shows no secret
for typo in "htp://user:hunter2@$hp/rhost/manifest.json" "htp://user:hunter2@$hp/rhost/manifest.json?sig=deadbeef" \
            "htps://user:hunter2@$hp/$s0" "htps://user:hunter2@$hp/$s0?sig=deadbeef"; do
  "$Z" run "$typo" $RUN --cache-dir "$T/ctypo" >"$T/typo.out" 2>&1; rc=$?
  checkv "$T/typo.out" "scheme typo ${typo%%:*}:// ($([[ $typo == *\?* ]] && echo with || echo without) a query): fails (rc $rc), names the URL schemes" \
    '[[ $rc -eq 1 ]] && grep -q "URLs supported: http://, https://, s3://" "$T/typo.out"'
  check "scheme typo ${typo%%:*}://: no secret in the message" '! grep -q "hunter2\|deadbeef" "$T/typo.out"'
done

for typo in "s3:/$BUCKET/rhost/$(basename "$s0")" "http:/$hp/$s0" "HTTP:$hp/rhost/manifest.json"; do
  "$Z" run "$typo" $RUN --cache-dir "$T/ctypo" >"$T/typo.out" 2>&1; rc=$?
  check "scheme without // ($typo): fails (rc $rc), says how a URL starts" \
    '[[ $rc -eq 1 ]] && grep -q "a URL starts with http://, https:// or s3://" "$T/typo.out"'
done

# --- an S3 endpoint that is not a URL: from the option, a usage error; from
# $AWS_ENDPOINT_URL, an error naming the setting (not libcurl's "bad URL")
"$Z" run "s3://$BUCKET/rhost/manifest.json" $RUN --s3-endpoint "localhost:9000" >"$T/ep.out" 2>&1; rc=$?
check "--s3-endpoint localhost:9000: usage error (rc $rc)" \
  '[[ $rc -eq 2 ]] && grep -q "an http:// or https:// URL" "$T/ep.out"'
AWS_ENDPOINT_URL="localhost:9000" AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s "$Z" run \
  "s3://$BUCKET/rhost/$(basename "$s0")" $RUN --retries 1 --cache-dir "$T/cep" >"$T/ep2.out" 2>&1; rc=$?
checkv "$T/ep2.out" "AWS_ENDPOINT_URL=localhost:9000: fails (rc $rc) naming the endpoint setting" \
  '[[ $rc -eq 1 ]] && grep -q "AWS_ENDPOINT_URL) is not an http:// or https:// URL" "$T/ep2.out"'

# --- a remote manifest listing "/path": the server's path (as a link in a
# web page), never a local file of this machine
printf '{"text": "local only"}\n' > "$T/local-only.jsonl"
printf '{"format_version": 1, "shards": [{"path": "%s"}]}' "$T/local-only.jsonl" > "$ROOT/rhost/abs-local.json"
printf '{"format_version": 1, "shards": [{"path": "/rhost/shard-00001.jsonl.zst"}]}' > "$ROOT/rhost/abs-server.json"
chmod a+r "$ROOT/rhost"/abs-*.json
"$Z" run "$HTTP/rhost/abs-local.json" $RUN --retries 1 --cache-dir "$T/cabs" >"$T/abs.out" 2>&1; rc=$?
checkv "$T/abs.out" "remote manifest listing a local absolute path: not read here (rc $rc, HTTP 404 for the server's path)" \
  '[[ $rc -eq 1 ]] && grep -q "404" "$T/abs.out" && grep -q "$HTTP$T/local-only.jsonl" "$T/abs.out"'
"$Z" run "$HTTP/rhost/abs-server.json" $RUN --cache-dir "$T/cabs" --emit-ids "$T/absok" >"$T/abs2.out" 2>&1; rc=$?
checkv "$T/abs2.out" "remote manifest listing /rhost/...: the server's shard (rc $rc, 60 samples)" \
  '[[ $rc -eq 0 && $(wc -l < "$T/absok/rank-0.ids") -eq 60 ]]'

# --- lease taken over: A downloads slowly (the proxy's first answer waits
# 3 s) and is paused (SIGSTOP) past its 1 s lease; B takes the download over
# and completes it; A, resumed, finishes its own transfer, finds its lease
# lost, and must use B's file instead of failing.
# (one shard: A's download is the one its fetch waits on)
manifest_via "slowfirst:3000" | python3 -c '
import json, sys; m = json.load(sys.stdin); m["shards"] = m["shards"][:1]; print(json.dumps(m))' \
  > "$T/lease.json"
proxy_reset
LRUN="$RUN --lease 1 --cache-dir $T/clease"
"$Z" run "$T/lease.json" $LRUN --emit-ids "$T/la" >"$T/la.out" 2>&1 &
pa=$!
until_lock "$T/clease"
kill -STOP "$pa"
"$Z" run "$T/lease.json" $LRUN --emit-ids "$T/lb" >"$T/lb.out" 2>&1; rb=$?
kill -CONT "$pa"
wait "$pa"; ra=$?
checkv "$T/lb.out" "lease: B, which took the downloads over, completes (rc $rb)" '[[ $rb -eq 0 ]]'
checkv "$T/la.out" "lease: A, whose leases were lost, completes (rc $ra)" '[[ $ra -eq 0 ]]'
check "lease: A's downloads were taken over" 'grep -q "taken over" "$T/lb.out"'
ids_of "$T/la/rank-0.ids" > "$T/la.ids" 2>/dev/null
ids_of "$T/lb/rank-0.ids" > "$T/lb.ids" 2>/dev/null
check "lease: A delivered B's sample ids (60)" \
  '[[ $(wc -l < "$T/la.ids") -eq 60 ]] && cmp -s "$T/la.ids" "$T/lb.ids"'
check "lease: no temporary or lock file left" \
  '[[ $(ls -A "$T/clease" | grep -c "\.part\|\.zdc\.lock") -eq 0 ]]'
# the same with `zephon index` counting a shard the manifest gives no count
# for: its wait on the download is the acquire's own
python3 - "$ROOT/rhost/manifest.json" "$PROXY" > "$T/nocount.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["shards"][1]
print(json.dumps({"format_version": 1, "shards": [
    {"path": sys.argv[2] + "/f/slowfirst:3000/rhost/" + s["path"], "bytes": s["bytes"],
     "format": s["format"]}]}))
PY
proxy_reset
"$Z" index --lease 1 --cache-dir "$T/clease2" -o "$T/ia.json" "$T/nocount.json" >"$T/ia.out" 2>&1 &
pa=$!
until_lock "$T/clease2"
kill -STOP "$pa"
"$Z" index --lease 1 --cache-dir "$T/clease2" -o "$T/ib.json" "$T/nocount.json" >"$T/ib.out" 2>&1; rb=$?
kill -CONT "$pa"
wait "$pa"; ra=$?
checkv "$T/ia.out" "lease (index): B completes (rc $rb), A, whose lease was lost, too (rc $ra)" \
  '[[ $rb -eq 0 && $ra -eq 0 ]] && grep -q "taken over" "$T/ib.out"'
check "lease (index): A's manifest counts the shard's 60 samples" \
  'grep -q "\"samples\": 60" "$T/ia.json"'
# --- a stale manifest size (the shard on the server was replaced): a clear
# error soon, with the default retries (the same wrong size answered twice is
# the object's size: no more retries of that download)
manifest_via "none" | python3 -c '
import json, sys; m = json.load(sys.stdin); s = m["shards"][0]
s["path"] = s["path"].replace("/f/none", ""); s["bytes"] -= 100; s.pop("xxh64")
m["shards"] = [s]; print(json.dumps(m))' > "$T/stalebytes.json"
proxy_reset
t0=$(date +%s%N)
"$Z" run "$T/stalebytes.json" $RUN --cache-dir "$T/cstaleb" >"$T/staleb.out" 2>&1; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
gets=$(proxy_stats | python3 -c "import json,sys;print(sum(json.load(sys.stdin)['GET'].values()))")
checkv "$T/staleb.out" "stale manifest size: fails (rc $rc) saying so, naming the shard" \
  '[[ $rc -eq 1 ]] && grep -q "shard-00000.*re-run zephon index" "$T/staleb.out"'
check "stale manifest size: 2 requests per download try, not retries+1 ($gets GETs, ${ms} ms)" \
  '[[ $gets -le 8 ]]'
check "stale manifest size: nothing kept in the cache" '[[ $(ls -A "$T/cstaleb" | grep -c "\.zdc") -eq 0 ]]'

# --- a cache folder on a full file system (root only: a 100 KiB tmpfs): a
# clear error naming the cache file and the cause; no corrupt file kept
if [[ $(id -u) -eq 0 ]] && mkdir -p "$T/full" && mount -t tmpfs -o size=100k tmpfs "$T/full" 2>/dev/null; then
  trap 'umount "$T/full" 2>/dev/null; rm -rf "$T"' EXIT
  "$Z" run "$HTTP/rhost/manifest.json" $RUN --prefetch 100:3 --cache-dir "$T/full/c" >"$T/full.out" 2>&1; rc=$?
  checkv "$T/full.out" "full disk: the run fails (rc $rc)" '[[ $rc -eq 1 ]]'
  # (the download that meets the full disk first may be writing its lock,
  # its partial file or flushing it: each names its file and says what to do)
  check "full disk: the message names the cache file, ENOSPC, and what to do" \
    'grep "No space left on device" "$T/full.out" | grep "$T/full/c/" | grep -q "the cache.s file system is full"'
  okfiles=1
  for f in "$T/full/c"/*.zdc; do
    [[ -e $f ]] || continue
    src="$ROOT/rhost/$(basename "$f" .zdc | sed 's/^[0-9a-f]*-//')"
    cmp -s "$f" "$src" || okfiles=0
  done
  check "full disk: every file left in the cache is a complete shard" '[[ $okfiles -eq 1 ]]'
  check "full disk: no temporary file left" '[[ $(ls -A "$T/full/c" | grep -c "\.part") -eq 0 ]]'
  umount "$T/full"
else
  echo "ok - full disk: skipped (needs root and tmpfs)"
fi

# --- a stale manifest (record count off, bytes and hash right): a clear error
# and one download; the good file is not called corrupt, deleted and fetched
# again. A cached file whose bytes really changed is.
manifest_via "none" | python3 -c '
import json, sys; m = json.load(sys.stdin); s = m["shards"][0]
s["path"] = s["path"].replace("/f/none", ""); s["samples"] += 10
m["shards"] = [s]; print(json.dumps(m))' > "$T/stalecount.json"
proxy_reset
"$Z" run "$T/stalecount.json" $RUN --cache-dir "$T/cstale" >"$T/stale.out" 2>&1; rc=$?
gets=$(proxy_stats | python3 -c "import json,sys;print(sum(json.load(sys.stdin)['GET'].values()))")
check "stale record count: error (rc $rc) saying so" '[[ $rc -eq 1 ]] && grep -q "stale manifest" "$T/stale.out"'
check "stale record count: downloaded once ($gets GETs), not called corrupt" \
  '[[ $gets -eq 1 ]] && ! grep -q "corrupt" "$T/stale.out"'
check "stale record count: the good file stays in the cache" '[[ $(ls "$T/cstale" | grep -c "\.zdc$") -eq 1 ]]'
python3 -c '
import json, sys; m = json.load(open(sys.argv[1])); m["shards"][0]["samples"] -= 10
print(json.dumps(m))' "$T/stalecount.json" > "$T/rightcount.json"
f=$(ls "$T/cstale"/*.zdc)
printf 'X' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null
"$Z" run "$T/rightcount.json" $RUN --cache-dir "$T/cstale" >"$T/refetch.out" 2>&1; rc=$?
gets=$(proxy_stats | python3 -c "import json,sys;print(sum(json.load(sys.stdin)['GET'].values()))")
check "a cached file with a changed byte: found corrupt, fetched again (rc $rc, $gets GETs)" \
  '[[ $rc -eq 0 && $gets -eq 2 ]] && grep -q "corrupt" "$T/refetch.out"'

# a lease too short to be renewed reliably is refused
"$Z" run "$T/lease.json" $RUN --lease 0.001 >"$T/lshort.out" 2>&1; rc=$?
check "--lease 0.001: usage error (rc $rc)" '[[ $rc -eq 2 ]] && grep -q "from 1 to" "$T/lshort.out"'

finish
