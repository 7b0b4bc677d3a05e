#!/usr/bin/env bash
# test_remote_run.sh ZEPHON - remote shards end to end against real loopback
# servers (nginx http/https, the S3 server): the same run over each gives
# exactly the sample ids of the run on local files; a remote manifest, URL
# shards given one by one, `zephon index` of URLs; TLS verified (CA given,
# refused without it, --insecure warns); a cache limit too small is a clear
# error at startup; 404/403 fail fast naming the URL without its secrets.
set -u
Z=${1:?usage: test_remote_run.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rrun

make_ds rrun 6 120
RUN="--quiet --seed 3 --threads 2 --microbatch 8"
"$Z" run "$ROOT/rrun/manifest.json" $RUN --emit-ids "$T/local" >/dev/null || bad "local run"
ids_of "$T/local/rank-0.ids" > "$T/local.ids"
check "local run delivered samples" '[[ $(wc -l < "$T/local.ids") -eq 720 ]]'

same() { # NAME DIR: the ids in DIR equal the local run's
  got="$T/$1.ids"
  ids_of "$2/rank-0.ids" > "$got" 2>/dev/null
  check "$1: same sample ids, same order as local" 'cmp -s "$T/local.ids" "$got"'
}

# http: a remote manifest (relative paths resolve against its URL)
"$Z" run "$HTTP/rrun/manifest.json" $RUN $FAST --cache-dir "$T/c1" --prefetch 200:2 \
  --emit-ids "$T/http" >"$T/http.out" 2>&1 || { bad "http run"; cat "$T/http.out"; }
same http "$T/http"
check "http: shards are in the cache folder" '[[ $(ls "$T/c1" | grep -c "shard-") -eq 6 ]]'
check "http: no temporary file left" '[[ $(ls -a "$T/c1" | grep -c "\.part") -eq 0 ]]'
# a second run reads the cache (nginx is not asked again: the proxy counts)
proxy_reset
"$Z" run "$PROXY/rrun/manifest.json" $RUN $FAST --cache-dir "$T/c2" --emit-ids "$T/px1" >/dev/null 2>&1 || bad "proxy run 1"
n1=$(proxy_stats | python3 -c "import json,sys;d=json.load(sys.stdin)['GET'];print(sum(v for k,v in d.items() if 'shard-' in k))")
"$Z" run "$PROXY/rrun/manifest.json" $RUN $FAST --cache-dir "$T/c2" --emit-ids "$T/px2" >/dev/null 2>&1 || bad "proxy run 2"
n2=$(proxy_stats | python3 -c "import json,sys;d=json.load(sys.stdin)['GET'];print(sum(v for k,v in d.items() if 'shard-' in k))")
same proxy "$T/px2"
check "each shard downloaded once (first run: $n1 GETs)" '[[ $n1 -eq 6 ]]'
check "second run served from the cache (GETs still $n2)" '[[ $n2 -eq 6 ]]'

# URL shards given one by one, and `zephon index` of URLs writing a manifest of URLs
urls=(); for f in "$ROOT"/rrun/shard-*; do urls+=("$HTTP/rrun/$(basename "$f")"); done
"$Z" index -o "$T/urls.json" --hash --cache-dir "$T/c3" "${urls[@]}" >/dev/null 2>"$T/idx.err" ||
  { bad "zephon index of URLs"; cat "$T/idx.err"; }
check "index of URLs: manifest lists the URLs" 'grep -q "\"path\": \"$HTTP/rrun/shard-" "$T/urls.json"'
check "index of URLs: same counts as local" '[[ $(python3 -c "import json;print(sum(s[\"samples\"] for s in json.load(open(\"$T/urls.json\"))[\"shards\"]))") -eq 720 ]]'
"$Z" run "$T/urls.json" $RUN $FAST --cache-dir "$T/c3" --emit-ids "$T/urls" >/dev/null 2>&1 || bad "run from a manifest of URLs"
same "manifest of URLs" "$T/urls"

# https: verified against the test CA; refused without it; --insecure warns
if [[ -n "$HTTPS" ]]; then
  "$Z" run "$HTTPS/rrun/manifest.json" $RUN $FAST --ca-file "$CA" --cache-dir "$T/c4" \
    --emit-ids "$T/https" >"$T/https.out" 2>&1 || { bad "https run"; cat "$T/https.out"; }
  same https "$T/https"
  "$Z" run "$HTTPS/rrun/manifest.json" $RUN $FAST --cache-dir "$T/c5" >"$T/notrust.out" 2>&1; rc=$?
  check "https without the CA: refused (rc $rc)" '[[ $rc -ne 0 ]] && grep -qi "certificate\|SSL\|TLS" "$T/notrust.out"'
  "$Z" run "$HTTPS/rrun/manifest.json" $RUN $FAST --insecure --cache-dir "$T/c5" \
    --emit-ids "$T/insec" >"$T/insec.out" 2>&1 || bad "https --insecure run"
  check "--insecure warns" 'grep -qi "insecure\|not verif" "$T/insec.out"'
  # redirects: followed within https and within http; never from https to http
  "$Z" run "$HTTPS/redirect/rrun/shard-00000.jsonl.zst" --quiet $FAST --ca-file "$CA" --cache-dir "$T/c11" \
    >"$T/rs.out" 2>&1 || { bad "https -> https redirect followed"; cat "$T/rs.out"; }
  "$Z" run "$HTTP/redirect/rrun/shard-00000.jsonl.zst" --quiet $FAST --cache-dir "$T/c11" \
    >"$T/rh.out" 2>&1 || { bad "http -> http redirect followed"; cat "$T/rh.out"; }
  "$Z" run "$HTTPS/redirect-http/rrun/shard-00000.jsonl.zst" --quiet $FAST --ca-file "$CA" --cache-dir "$T/c12" \
    >"$T/rd.out" 2>&1; rc=$?
  check "https -> http redirect refused (rc $rc)" '[[ $rc -ne 0 ]] && grep -qi "redirect\|protocol" "$T/rd.out"'
  check "https -> http redirect: nothing downloaded" '[[ $(ls "$T/c12" 2>/dev/null | grep -c "\.zdc$") -eq 0 ]]'
fi

# S3 (SigV4): upload the dataset, run from s3:// with the credentials in the environment
if [[ -n "$S3" ]]; then
  for f in "$ROOT"/rrun/*; do bash "$HERE/../net/s3put.sh" "$f" "rrun/$(basename "$f")" || bad "s3 upload $f"; done
  AWS_ACCESS_KEY_ID=$S3_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET "$Z" run "s3://$BUCKET/rrun/manifest.json" \
    $RUN $FAST --s3-endpoint "$S3" --cache-dir "$T/c6" --emit-ids "$T/s3" >"$T/s3.out" 2>&1 ||
    { bad "s3 run"; cat "$T/s3.out"; }
  same s3 "$T/s3"
  AWS_ACCESS_KEY_ID=$S3_KEY AWS_SECRET_ACCESS_KEY=wrong-secret "$Z" run "s3://$BUCKET/rrun/manifest.json" \
    $RUN $FAST --s3-endpoint "$S3" --cache-dir "$T/c7" >"$T/s3bad.out" 2>&1; rc=$?
  check "s3 with a wrong secret: fails (rc $rc), secret not printed" \
    '[[ $rc -ne 0 ]] && grep -q "403" "$T/s3bad.out" && ! grep -q "wrong-secret" "$T/s3bad.out"'
  env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$Z" run "s3://$BUCKET/rrun/manifest.json" $RUN \
    --s3-endpoint "$S3" --cache-dir "$T/c7" >"$T/s3none.out" 2>&1; rc=$?
  check "s3 without credentials: clear error" '[[ $rc -ne 0 ]] && grep -q "AWS_ACCESS_KEY_ID" "$T/s3none.out"'
fi

# 404 / 403: fail fast, the URL named without user:password and query string
secret_url="http://user:hunter2@${HTTP#http://}/rrun/missing.jsonl?X-Amz-Signature=deadbeef"
t0=$(date +%s%N)
"$Z" run "$secret_url" $RUN --retries 5 --retry-base 1 --cache-dir "$T/c8" >"$T/404.out" 2>&1; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "404 fails (rc $rc) fast (${ms} ms, no retries)" '[[ $rc -ne 0 && $ms -lt 3000 ]]'
check "404 message names the URL and the status" 'grep -q "404" "$T/404.out" && grep -q "/rrun/missing.jsonl" "$T/404.out"'
check "404 message has no secret" '! grep -q "hunter2\|deadbeef" "$T/404.out"'
"$Z" run "$PROXY/f/403*0/rrun/shard-00000.jsonl.zst" $RUN --retries 5 --retry-base 1 --cache-dir "$T/c8" >"$T/403.out" 2>&1; rc=$?
check "403 fails with its status" '[[ $rc -ne 0 ]] && grep -q "403" "$T/403.out"'

# the first batch waits only for the shards it needs: every shard's download
# takes 0.5 s (proxy), prefetch looks at the whole dataset with one transfer
# at a time; the first batch needs one shard (--block-shards 1)
proxy_manifest rrun "slowfirst:500*0" > "$T/slow.json"
"$Z" run "$T/slow.json" --json --seed 3 --threads 2 --microbatch 8 --block-shards 1 --prefetch 100000:1 \
  --cache-dir "$T/c10" >"$T/slow.out" 2>&1 || bad "slow run"
read -r fb total <<<"$(python3 -c "import json;d=json.loads(open('$T/slow.out').read().strip().splitlines()[-1]);print(d['first_batch_s'], d['seconds'])" 2>/dev/null)"
# (relative to the run's end: a sanitizer or a busy machine adds to the start
# and to every step alike, so the check is that at least two of the 0.5 s
# downloads were still to come when the first batch arrived)
check "first batch after one download (${fb:-?} s), not the whole dataset's (run ${total:-?} s)" \
  'python3 -c "import sys; sys.exit(0 if ${fb:-9} < ${total:-0} - 1.0 and ${total:-0} >= 2.5 else 1)"'

# a cache limit too small for what the pipeline holds in flight: error at startup
"$Z" run "$HTTP/rrun/manifest.json" $RUN --fetch-parallelism 2 --cache-limit 1k --cache-dir "$T/c9" >"$T/small.out" 2>&1; rc=$?
check "cache limit too small: clear error (rc $rc)" '[[ $rc -eq 1 ]] && grep -q "cache_limit_bytes = 1024: too small" "$T/small.out"'
check "cache limit too small: nothing downloaded" '[[ $(ls "$T/c9" 2>/dev/null | grep -c shard-) -eq 0 ]]'
finish
