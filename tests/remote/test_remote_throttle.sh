#!/usr/bin/env bash
# test_remote_throttle.sh ZEPHON - a run against a store that throttles: 400
# shards behind the fault proxy's "slowdown:30" (30 requests a second, a
# burst of 7.5; above it 503 SlowDown with Retry-After: 1) at 500 ms a
# request, --prefetch 4096:32 (64 requests a second wanted). The run
# completes with the local run's sample ids (each refused request is
# retried after its Retry-After, with the default --retries); after the
# first 5 s the request rate at the proxy (refused ones included) stays
# within 1.1x of the limit over every 4 s, and the downloads reach 0.9 of
# the limit (docs/storage.md, "Throttling").
set -u
Z=${1:?usage: test_remote_throttle.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rthr
LIMIT=30

make_ds rthr 400 2
RUN="--quiet --seed 3 --threads 2 --microbatch 8"
"$Z" run "$ROOT/rthr/manifest.json" $RUN --emit-ids "$T/local" >/dev/null || bad "local run"
ids_of "$T/local/rank-0.ids" > "$T/local.ids"
check "local run delivered samples" '[[ $(wc -l < "$T/local.ids") -eq 800 ]]'

proxy_manifest rthr "slowdown:$LIMIT*0,delay:500*0" > "$T/slow.json"
proxy_reset
timeout 120 "$Z" run "$T/slow.json" $RUN --connect-timeout 2 --cache-dir "$T/c" \
  --prefetch 4096:32 --emit-ids "$T/remote" >"$T/run.out" 2>&1 || { bad "throttled run"; tail -5 "$T/run.out"; }
ids_of "$T/remote/rank-0.ids" > "$T/remote.ids" 2>/dev/null
check "same sample ids, same order as local" 'cmp -s "$T/local.ids" "$T/remote.ids"'
curl -s --max-time 5 "$PROXY/__events?prefix=/$PFX/" > "$T/events.json"
read -r n refused span rate good <<<"$(python3 - "$T/events.json" "$LIMIT" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1])); limit = float(sys.argv[2])
t = sorted(e[0] for e in ev); ok = sorted(e[0] for e in ev if e[1] == 200)
t0, t1 = t[0], t[-1]
lo, hi = t0 + 5.0, t1 - 1.0            # after the first 5 s, to 1 s before the end
worst, a = 0.0, lo
while a + 4.0 <= hi:                   # every 4 s
    worst = max(worst, sum(1 for x in t if a <= x < a + 4.0) / 4.0)
    a += 0.5
good = sum(1 for x in ok if lo <= x < hi) / (hi - lo) if hi > lo else 0
print(len(ok), len(t) - len(ok), "%.1f" % (t1 - t0), "%.3f" % (worst / limit), "%.3f" % (good / limit))
PY
)"
echo "# $n downloads, $refused refused, in $span s; after 5 s: request rate <= ${rate}x the limit over 4 s, downloads ${good} of the limit"
check "each shard downloaded once ($n)" '[[ $n -eq 400 ]]'
check "some requests refused: the store throttled ($refused)" '[[ $refused -gt 0 ]]'
check "a run long enough to measure ($span s)" 'python3 -c "import sys; sys.exit(0 if $span >= 12 else 1)"'
check "request rate within 1.1x of the limit (${rate}x)" 'python3 -c "import sys; sys.exit(0 if 0 < $rate <= 1.1 else 1)"'
check "downloads at least 0.9 of the limit (${good})" 'python3 -c "import sys; sys.exit(0 if $good >= 0.9 else 1)"'
proxy_reset  # its many paths out of the proxy's counts (other tests list them all)
finish
