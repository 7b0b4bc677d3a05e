#!/usr/bin/env bash
# test_fault_proxy.sh - the loopback servers behave as the tests rely on (servers from
# the `net` fixture, addresses in $ZT_NETENV):
#  1. nginx over http: Range (206), ETag, If-Range (matching: 206, stale: 200 whole),
#     If-None-Match (304); the same through the proxy (headers forwarded);
#  2. each fault kind of the proxy: status codes with an HTML page, Retry-After, the
#     byte counts of reset/stall/short/badlen, corrupt differs at the same length,
#     slowfirst/delay wait, counts (*N, *0) and per-URL counters, HEAD does not use up
#     a body fault, a resumed Range after a reset completes the file, a bad fault list
#     is 400; slowdown (a rate limit: 503 SlowDown at once) and /__events;
#  3. /__stats counts GET and HEAD per real path and the body bytes; /__reset?prefix=
#     clears counts and fault counters of that prefix only;
#  4. https works with ZT_CA and fails without it;
#  5. S3: s3put.sh uploads; a signed GET (and Range) returns the bytes; an unsigned GET
#     and a GET signed with a wrong secret are refused with 403.
set -u
. "$(dirname "$0")/../testlib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
: "${ZT_NETENV:?ZT_NETENV is not set (run under ctest with the net fixture)}"
get() { sed -n "s/^$1=//p" "$ZT_NETENV" | head -n1; }
ROOT=$(get ZT_ROOT); HTTP=$(get ZT_HTTP); HTTPS=$(get ZT_HTTPS); CA=$(get ZT_CA)
P=$(get ZT_PROXY); S3=$(get ZT_S3); BUCKET=$(get ZT_S3_BUCKET)
S3KEY=$(get ZT_S3_KEY); S3SECRET=$(get ZT_S3_SECRET)
for v in ROOT HTTP HTTPS CA P S3 BUCKET S3KEY S3SECRET; do
  [[ -n "${!v}" ]] || { echo "FAIL - $ZT_NETENV lacks $v"; exit 1; }
done

# fixture files under a folder of this run's own (parallel tests share the servers)
sub=fp$$
mkdir -p "$ROOT/$sub"
trap 'rm -rf "$T" "$ROOT/$sub"' EXIT
head -c 1000000 /dev/urandom >"$ROOT/$sub/data.bin"
SIZE=1000000
F=$sub/data.bin

# req ARGS...: curl into $T/body, headers into $T/hdr; sets CODE, NBYTES, RC, TTFB, TOTAL
req() {
  local out
  out=$(curl -s -o "$T/body" -D "$T/hdr" --max-time 10 \
    -w '%{http_code} %{size_download} %{time_starttransfer} %{time_total}' "$@")
  RC=$?
  read -r CODE NBYTES TTFB TOTAL <<<"$out"
}
hdr() { grep -i "^$1:" "$T/hdr" | tail -n1 | cut -d: -f2- | tr -d ' \r'; }
same() { cmp -s "$T/body" "$1"; }

# ---------------------------------------------------------------- 1. nginx, Range, ETag
req "$HTTP/$F"
check "http: 200 and the file's bytes" '[[ $CODE == 200 ]] && same "$ROOT/$F"'
etag=$(hdr ETag)
check "http: ETag present ($etag)" '[[ -n "$etag" ]]'
check "http: Accept-Ranges bytes" '[[ $(hdr Accept-Ranges) == bytes ]]'
req -r 1000-1999 "$HTTP/$F"
tail -c +1001 "$ROOT/$F" | head -c 1000 >"$T/want"
check "http: Range -> 206 with those 1000 bytes" '[[ $CODE == 206 ]] && same "$T/want"'
req -r 1000-1999 -H "If-Range: $etag" "$HTTP/$F"
check "http: If-Range matching -> 206" '[[ $CODE == 206 && $NBYTES == 1000 ]]'
req -r 1000-1999 -H 'If-Range: "stale"' "$HTTP/$F"
check "http: If-Range stale -> 200 whole file" '[[ $CODE == 200 && $NBYTES == $SIZE ]]'
req -H "If-None-Match: $etag" "$HTTP/$F"
check "http: If-None-Match -> 304" '[[ $CODE == 304 ]]'
req "$HTTP/$sub/missing.bin"
check "http: a missing file -> 404" '[[ $CODE == 404 ]]'

req "$P/$F"
check "proxy: plain 200 and the same bytes" '[[ $CODE == 200 ]] && same "$ROOT/$F"'
check "proxy: ETag relayed" '[[ $(hdr ETag) == "$etag" ]]'
check "proxy: Content-Length relayed" '[[ $(hdr Content-Length) == $SIZE ]]'
req -r 1000-1999 -H "If-Range: $etag" "$P/$F"
check "proxy: Range + If-Range forwarded -> 206 with the bytes" \
  '[[ $CODE == 206 ]] && same "$T/want"'
req -r 1000-1999 -H 'If-Range: "stale"' "$P/$F"
check "proxy: stale If-Range -> 200 whole" '[[ $CODE == 200 && $NBYTES == $SIZE ]]'
req -H "If-None-Match: $etag" "$P/$F"
check "proxy: If-None-Match forwarded -> 304" '[[ $CODE == 304 ]]'
req "$P/$sub/missing.bin"
check "proxy: a missing file -> 404 relayed" '[[ $CODE == 404 ]]'

# ---------------------------------------------------------------- 2. faults
for code in 500 503 403 404; do
  req "$P/f/$code/$F"
  check "fault $code: status $code ($CODE)" '[[ $CODE == $code ]]'
  check "fault $code: an HTML error page" \
    '[[ $(hdr Content-Type) == text/html* ]] && grep -q "<html" "$T/body"'
  req "$P/f/$code/$F"
  check "fault $code: the next request is served (count 1)" '[[ $CODE == 200 ]] && same "$ROOT/$F"'
done
req "$P/f/429:7/$F"
check "fault 429:7: 429 with Retry-After: 7" '[[ $CODE == 429 && $(hdr Retry-After) == 7 ]]'
req "$P/f/500*2/$F"; c1=$CODE; req "$P/f/500*2/$F"; c2=$CODE; req "$P/f/500*2/$F"; c3=$CODE
check "fault 500*2: 500, 500, then 200 ($c1 $c2 $c3)" '[[ $c1 == 500 && $c2 == 500 && $c3 == 200 ]]'
ok0=1; for i in 1 2 3 4; do req "$P/f/503*0/$F"; [[ $CODE == 503 ]] || ok0=0; done
check "fault 503*0: every request 503" '[[ $ok0 == 1 ]]'
req "$P/f/500,503/$F"; c1=$CODE; req "$P/f/500,503/$F"; c2=$CODE; req "$P/f/500,503/$F"; c3=$CODE
check "fault list 500,503: one fault a request, in order ($c1 $c2 $c3)" \
  '[[ $c1 == 500 && $c2 == 503 && $c3 == 200 ]]'
req "$P/f/bogus:1/$F"
check "a bad fault list -> 400" '[[ $CODE == 400 ]]'

req "$P/f/reset:1000/$F"
check "fault reset:1000: headers (200), 1000 bytes, then a reset (curl rc $RC)" \
  '[[ $CODE == 200 && $NBYTES == 1000 && $RC == 56 ]]'
head -c 1000 "$ROOT/$F" >"$T/want"
check "fault reset:1000: the bytes before the reset are the file's" 'same "$T/want"'
req -r 1000- -H "If-Range: $etag" "$P/f/reset:1000/$F"
tail -c +1001 "$ROOT/$F" >"$T/want"
check "after the reset: Range 1000- -> 206 and the rest of the file" \
  '[[ $CODE == 206 ]] && same "$T/want"'

req --max-time 2 "$P/f/stall:3000/$F"
check "fault stall:3000: 3000 bytes then no more until curl's 2 s timeout (rc $RC, ${TOTAL}s)" \
  '[[ $CODE == 200 && $NBYTES == 3000 && $RC == 28 ]] && awk "BEGIN{exit !($TOTAL >= 1.9)}"'

req "$P/f/short:5000/$F"
check "fault short:5000: the full Content-Length declared, 5000 bytes, closed (rc $RC)" \
  '[[ $CODE == 200 && $(hdr Content-Length) == $SIZE && $NBYTES == 5000 && $RC == 18 ]]'

req "$P/f/badlen/$F"
check "fault badlen: Content-Length above the size, the whole body, closed (rc $RC)" \
  '[[ $CODE == 200 && $(hdr Content-Length) -gt $SIZE && $NBYTES == $SIZE && $RC == 18 ]]'
head -c $SIZE "$T/body" >"$T/b2"
check "fault badlen: the body is the file's" 'cmp -s "$T/b2" "$ROOT/$F"'

req "$P/f/corrupt/$F"
check "fault corrupt: 200 with the same length" '[[ $CODE == 200 && $NBYTES == $SIZE && $RC == 0 ]]'
check "fault corrupt: the bytes differ from the file's" '! same "$ROOT/$F"'
req "$P/f/corrupt/$F"
check "fault corrupt: the next request is clean" 'same "$ROOT/$F"'

for kind in slowfirst delay; do
  req "$P/f/$kind:800/$F"
  check "fault $kind:800: the first byte after >= 0.8 s (${TTFB}s), then the file" \
    '[[ $CODE == 200 ]] && same "$ROOT/$F" && awk "BEGIN{exit !($TTFB >= 0.8)}"'
  req "$P/f/$kind:800/$F"
  check "fault $kind:800: the next request without the wait (${TTFB}s)" \
    'awk "BEGIN{exit !($TTFB < 0.5)}"'
done
req "$P/f/slowfirst:600,500/$F"
check "slowfirst combines with a status fault (${TTFB}s, $CODE)" \
  '[[ $CODE == 500 ]] && awk "BEGIN{exit !($TTFB >= 0.6)}"'

req -I "$P/f/reset:10/$F"
check "HEAD with a body fault: 200, headers only" \
  '[[ $CODE == 200 && $(hdr Content-Length) == $SIZE ]]'
req "$P/f/reset:10/$F"
check "HEAD did not use the body fault up: the GET is reset after 10 bytes" \
  '[[ $NBYTES == 10 && $RC == 56 ]]'

# ---------------------------------------------------------------- 3. stats and reset
mkdir -p "$ROOT/$sub/st"
head -c 4096 /dev/urandom >"$ROOT/$sub/st/a.bin"
A=$sub/st/a.bin
curl -s -o /dev/null "$P/$A"; curl -s -o /dev/null "$P/f/500/$A"; curl -s -o /dev/null "$P/f/500/$A"
curl -s -o /dev/null -I "$P/$A"
stats=$(curl -s "$P/__stats?prefix=/$sub/st/")
echo "stats: $stats"
jq_() { # STATS TABLE PATH -> the number or empty
  python3 -c 'import json, sys
d = json.loads(sys.argv[1])
print(d.get(sys.argv[2], {}).get(sys.argv[3], ""))' "$@"
}
check "stats: 3 GET of /$A (faulted ones counted under the real path)" \
  '[[ $(jq_ "$stats" GET "/$A") == 3 ]]'
check "stats: 1 HEAD of /$A" '[[ $(jq_ "$stats" HEAD "/$A") == 1 ]]'
check "stats: body bytes 8192 (two whole 4096-byte bodies)" \
  '[[ $(jq_ "$stats" bytes "/$A") == 8192 ]]'
check "stats?prefix= lists only that prefix" '[[ $(jq_ "$stats" GET "/$F") == "" ]]'
all=$(curl -s "$P/__stats")
check "stats without prefix has the other paths too" '[[ -n $(jq_ "$all" GET "/$F") ]]'
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$P/__reset?prefix=/$sub/st/")
check "POST /__reset?prefix= -> 200" '[[ $code == 200 ]]'
stats=$(curl -s "$P/__stats?prefix=/$sub/st/")
check "after the reset the prefix's counts are gone" '[[ $(jq_ "$stats" GET "/$A") == "" ]]'
all=$(curl -s "$P/__stats")
check "the reset kept the other paths' counts" '[[ -n $(jq_ "$all" GET "/$F") ]]'
req "$P/f/500/$A"
check "after the reset the fault counter starts again (500)" '[[ $CODE == 500 ]]'
code=$(curl -s -o /dev/null -w '%{http_code}' "$P/__reset")
check "GET /__reset is not a reset (404)" '[[ $code == 404 ]]'

# slowdown:R, a token bucket of R a second (a burst of max(1, R/4)): at 1 a
# second the first request passes, the next one at once is refused with
# S3's SlowDown and Retry-After: 1, at once (without the list's delay);
# /__events has both, with their status
mkdir -p "$ROOT/$sub/sd"
head -c 100 /dev/urandom >"$ROOT/$sub/sd/b.bin"
req "$P/f/slowdown:1*0,delay:300*0/$sub/sd/b.bin"
check "slowdown:1: the first request passes (200)" '[[ $CODE == 200 ]]'
req "$P/f/slowdown:1*0,delay:300*0/$sub/sd/b.bin"
check "slowdown:1: the next one: 503 SlowDown, Retry-After: 1, at once (${TTFB}s)" \
  '[[ $CODE == 503 && $(hdr Retry-After) == 1 ]] && grep -q SlowDown "$T/body" && awk "BEGIN{exit !($TTFB < 0.25)}"'
ev=$(curl -s "$P/__events?prefix=/$sub/sd/")
check "/__events?prefix=: both requests, in order, with their status" \
  'python3 -c "import json, sys; e = json.loads(sys.argv[1]); sys.exit(0 if [x[1] for x in e] == [200, 503] and e[0][0] <= e[1][0] else 1)" "$ev"'

# ---------------------------------------------------------------- 4. https
req --cacert "$CA" "$HTTPS/$F"
check "https with ZT_CA: 200 and the bytes" '[[ $CODE == 200 ]] && same "$ROOT/$F"'
req "$HTTPS/$F"
check "https without ZT_CA: certificate refused (curl rc $RC = 60)" '[[ $RC == 60 ]]'
req --cacert "$CA" -r 0-99 "${HTTPS/localhost/127.0.0.1}/$F"
check "https on 127.0.0.1 verifies too (IP in the certificate), Range 206" \
  '[[ $CODE == 206 && $NBYTES == 100 ]]'

# ---------------------------------------------------------------- 5. S3
key=$sub/obj.bin
check "s3put.sh uploads" 'bash "$HERE/s3put.sh" "$ROOT/$F" "$key"'
sig=(--aws-sigv4 "aws:amz:us-east-1:s3" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
req "${sig[@]}" --user "$S3KEY:$S3SECRET" "$S3/$BUCKET/$key"
check "s3: signed GET -> 200 and the bytes" '[[ $CODE == 200 ]] && same "$ROOT/$F"'
req "${sig[@]}" --user "$S3KEY:$S3SECRET" -r 1000-1999 "$S3/$BUCKET/$key"
tail -c +1001 "$ROOT/$F" | head -c 1000 >"$T/want"
check "s3: signed Range GET -> 206 and the bytes" '[[ $CODE == 206 ]] && same "$T/want"'
req -I "${sig[@]}" --user "$S3KEY:$S3SECRET" "$S3/$BUCKET/$key"
check "s3: signed HEAD -> 200 with the size" '[[ $CODE == 200 && $(hdr Content-Length) == $SIZE ]]'
req "$S3/$BUCKET/$key"
check "s3: unsigned GET -> 403" '[[ $CODE == 403 ]]'
req "${sig[@]}" --user "$S3KEY:wrong$S3SECRET" "$S3/$BUCKET/$key"
check "s3: GET signed with a wrong secret -> 403" '[[ $CODE == 403 ]]'
req "${sig[@]}" --user "S3RVER:S3RVER" "$S3/$BUCKET/$key"
check "s3: s3rver's default key is refused -> 403" '[[ $CODE == 403 ]]'
req "${sig[@]}" --user "$S3KEY:$S3SECRET" "$S3/$BUCKET/$sub/none.bin"
check "s3: a missing key -> 404" '[[ $CODE == 404 ]]'

finish
