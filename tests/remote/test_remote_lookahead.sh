#!/usr/bin/env bash
# test_remote_lookahead.sh ZEPHON - the prefetch look-ahead over many small
# remote shards: 240 shards of one sample each behind the fault proxy at
# 300 ms a request, --prefetch 4096:16. The look-ahead covers the samples
# admitted next however many shards they span, so the downloads run 16 at a
# time from the start: the 240 requests arrive within 18 s (at least 4 in
# flight on average; 16 at a time take about 5 s; when the look-ahead gave
# at most 64 shards per admission, the first chunks' shards were fetched one
# at a time on demand: about 55 s). The pending prefetches hold no cache
# entry: the run needs no more file descriptors than with a short
# look-ahead (ulimit -n 64). Same sample ids as the local run. Then the
# same with --prefetch auto.
set -u
Z=${1:?usage: test_remote_lookahead.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rlook

make_ds rlook 240 1
RUN="--quiet --seed 3 --threads 2 --microbatch 8"
"$Z" run "$ROOT/rlook/manifest.json" $RUN --emit-ids "$T/local" >/dev/null || bad "local run"
ids_of "$T/local/rank-0.ids" > "$T/local.ids"
check "local run delivered samples" '[[ $(wc -l < "$T/local.ids") -eq 240 ]]'

proxy_manifest rlook 'delay:300*0' > "$T/slow.json"
proxy_reset
( ulimit -n 64; timeout 120 "$Z" run "$T/slow.json" $RUN $FAST --cache-dir "$T/c" \
    --prefetch 4096:16 --emit-ids "$T/remote" ) >"$T/run.out" 2>&1 || { bad "remote run"; tail -5 "$T/run.out"; }
ids_of "$T/remote/rank-0.ids" > "$T/remote.ids" 2>/dev/null
check "same sample ids, same order as local" 'cmp -s "$T/local.ids" "$T/remote.ids"'
read -r n span <<<"$(curl -s --max-time 5 "$PROXY/__events?prefix=/$PFX/" | python3 -c "
import json, sys
t = sorted(e[0] for e in json.load(sys.stdin) if e[1] == 200)
print(len(t), '%.1f' % (t[-1] - t[0]) if t else 999)")"
echo "# $n downloads arrived within $span s"
check "each shard downloaded once ($n)" '[[ $n -eq 240 ]]'
check "downloads in parallel from the start ($span s <= 18 s)" \
  'python3 -c "import sys; sys.exit(0 if float(\"$span\") <= 18 else 1)"'

# --prefetch auto: over remote shards the automatic look-ahead starts at its
# cap (its downloads go to the disk cache, not memory) with at least 16
# downloads at once, so it keeps up with the fixed 4096:16 from the start;
# the metrics say so (when it started from 0 and rose a tuning period at a
# time, with as many downloads as threads, it took 83 s)
proxy_reset
( ulimit -n 64; timeout 120 "$Z" run "$T/slow.json" $RUN $FAST --cache-dir "$T/c2" \
    --prefetch auto --emit-ids "$T/auto" --metrics-out "$T/m.json" ) >"$T/run.out" 2>&1 ||
  { bad "remote run, --prefetch auto"; tail -5 "$T/run.out"; }
ids_of "$T/auto/rank-0.ids" > "$T/auto.ids" 2>/dev/null
check "--prefetch auto: same sample ids, same order as local" 'cmp -s "$T/local.ids" "$T/auto.ids"'
read -r n span <<<"$(curl -s --max-time 5 "$PROXY/__events?prefix=/$PFX/" | python3 -c "
import json, sys
t = sorted(e[0] for e in json.load(sys.stdin) if e[1] == 200)
print(len(t), '%.1f' % (t[-1] - t[0]) if t else 999)")"
echo "# --prefetch auto: $n downloads arrived within $span s"
check "--prefetch auto: each shard downloaded once ($n), in parallel from the start ($span s <= 18 s)" \
  '[[ $n -eq 240 ]] && python3 -c "import sys; sys.exit(0 if float(\"$span\") <= 18 else 1)"'
check "--prefetch auto: the metrics say the look-ahead started at its cap" \
  'python3 -c "
import json, sys
t = [e for e in json.load(open(sys.argv[1]))[\"metrics\"][\"tuning\"] if e[\"op\"] == \"prefetch\" and e[\"setting\"] == \"look_ahead\"]
sys.exit(0 if t and t[0][\"auto\"] and \"started at its cap\" in t[0][\"why\"] and t[0][\"value\"] == t[0][\"cap\"] else 1)" "$T/m.json"'
proxy_reset  # its many paths out of the proxy's counts (other tests list them all)
finish
