#!/usr/bin/env bash
# test_remote_watchdog.sh ZEPHON - the stall watchdog on a stalled server:
# the proxy holds the response for one shard 3 s; with --watchdog 0.5 the
# run prints, while it waits, which shard the fetch task is downloading
# (named, remote) and for how long, and the queue depths, then completes
# with the local run's sample ids; with --watchdog 0 the same run prints
# nothing of it.
set -u
Z=${1:?usage: test_remote_watchdog.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rwatch

make_ds rwatch 2 40
RUN="--seed 3 --no-shuffle --threads 2 --microbatch 8 --low-speed-time 20"
"$Z" run "$ROOT/rwatch/manifest.json" --quiet $RUN --emit-ids "$T/local" >/dev/null || bad "local run"
ids_of "$T/local/rank-0.ids" > "$T/local.ids"

# shard 1 through the proxy with a 3 s wait before its response
proxy_manifest rwatch "" "delay:3000" > "$T/stall.json"
proxy_reset
"$Z" run "$T/stall.json" --quiet $RUN --cache-dir "$T/c1" --watchdog 0.5 --emit-ids "$T/w" \
  >"$T/w.out" 2>"$T/w.err"; rc=$?
check "stalled server: the run completes (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/w.err"
ids_of "$T/w/rank-0.ids" > "$T/w.ids"
check "stalled server: the local run's sample ids" 'cmp -s "$T/local.ids" "$T/w.ids"'
check "watchdog: says how long no batch came" \
  'grep -q "warning: watchdog: no batch for 0.5 s (the consumer is waiting" "$T/w.err"'
check "watchdog: the fetch task downloading shard-00001 (remote), for how long" \
  'grep -Eq "watchdog: thread [0-9]+: fetch: loading shard .shard-00001.jsonl.zst. \(#1, remote: downloading\) for [0-9.]+ s" "$T/w.err"'
check "watchdog: again while it lasts (2.5 s)" \
  'grep -q "watchdog: no batch for 2.5 s" "$T/w.err"'
check "watchdog: the queue depths" \
  'grep -Eq "watchdog: queues: fetch [0-9]+ queued, 1/1 running; prefetch [0-9]+ queued, [0-9]+ running; [0-9]+ chunks in flight; 0 batches ready" "$T/w.err"'
check "watchdog: not after the stall (no line for 3.5 s)" '! grep -q "no batch for 3.5 s" "$T/w.err"'

# the same stall with the watchdog off: not a word of it
proxy_reset
"$Z" run "$T/stall.json" --quiet $RUN --cache-dir "$T/c2" --watchdog 0 >"$T/o.out" 2>"$T/o.err"; rc=$?
check "watchdog 0: completes (rc $rc), prints nothing of the stall" \
  '[[ $rc -eq 0 ]] && ! grep -q watchdog "$T/o.err"'
# a bad value is a usage error naming it
"$Z" run "$T/stall.json" --quiet --watchdog -1 >"$T/b.out" 2>&1; rc=$?
check "--watchdog -1: usage error (rc $rc) naming it" '[[ $rc -eq 2 ]] && grep -q -- "--watchdog" "$T/b.out"'
finish
