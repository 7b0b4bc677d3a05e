#!/usr/bin/env bash
# test_outputs.sh ZEPHON - `zephon run`'s outputs and signals:
#  1. a write error on any output (stdout, --emit-ids, --emit-digest,
#     --metrics-out; /dev/full, a folder that cannot be made) is reported
#     with the path and the system's reason, and the exit status is 1;
#  2. SIGINT and SIGTERM stop a run within a second: exit 128+signo, the
#     outputs end in complete lines, the metrics are written and say
#     "partial" and the signal.
set -u
Z=${1:?usage: test_outputs.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
export XDG_CACHE_HOME="$T/cache"

"$Z" gen --out "$T/ds" --shards 4 --samples-per-shard 400 --format jsonl >/dev/null || { echo "FAIL - gen"; exit 1; }
M="$T/ds/manifest.json"
: > "$T/plain"   # a regular file: nothing can be created below it (even as root)

# 1. write errors
if [[ -w /dev/full ]]; then
  "$Z" run "$M" --quiet > /dev/full 2>"$T/err"; rc=$?
  check "stdout on /dev/full: exit 1 ($rc)" '[[ $rc -eq 1 ]]'
  check "stdout on /dev/full: reason given" 'grep -q "standard output: No space left on device" "$T/err"'
  "$Z" run "$M" --quiet --observe=0 --json > /dev/full 2>"$T/err"; rc=$?
  check "--observe to /dev/full: exit 1" '[[ $rc -eq 1 ]] && grep -q "No space left" "$T/err"'
  "$Z" run "$M" --quiet --microbatch 1 --emit-digest /dev/full > "$T/out" 2>"$T/err"; rc=$?
  check "--emit-digest /dev/full: exit 1 ($rc)" '[[ $rc -eq 1 ]]'
  check "--emit-digest /dev/full: path and reason" 'grep -q "'"'"'/dev/full'"'"': No space left on device" "$T/err"'
  check "--emit-digest /dev/full: the run stopped at the error" 'grep -q "could not be written" "$T/err"'
  "$Z" run "$M" --quiet --metrics-out /dev/full >/dev/null 2>"$T/err"; rc=$?
  check "--metrics-out /dev/full: exit 1 ($rc), path and reason" \
    '[[ $rc -eq 1 ]] && grep -q "'"'"'/dev/full'"'"': No space left on device" "$T/err"'
  check "/dev/full is still a device" '[[ -c /dev/full ]]'
else
  bad "/dev/full is not writable here"
fi
"$Z" run "$M" --quiet --emit-ids "$T/plain/ids" >/dev/null 2>"$T/err"; rc=$?
check "--emit-ids below a file: exit 1, path and reason" \
  '[[ $rc -eq 1 ]] && grep -q "$T/plain/ids" "$T/err" && grep -q "Not a directory" "$T/err"'
"$Z" run "$M" --quiet --emit-digest "$T/plain/d.txt" >/dev/null 2>"$T/err"; rc=$?
check "--emit-digest below a file: exit 1, path and reason" \
  '[[ $rc -eq 1 ]] && grep -q "$T/plain/d.txt" "$T/err" && grep -q "Not a directory" "$T/err"'
"$Z" run "$M" --quiet --metrics-out "$T/plain/m.json" >/dev/null 2>"$T/err"; rc=$?
check "--metrics-out below a file: exit 1, path and reason" \
  '[[ $rc -eq 1 ]] && grep -q "$T/plain/m.json" "$T/err" && grep -q "Not a directory" "$T/err"'
if [[ $(id -u) -ne 0 ]]; then
  mkdir "$T/ro" && chmod 555 "$T/ro"
  "$Z" run "$M" --quiet --emit-digest "$T/ro/d.txt" >/dev/null 2>"$T/err"; rc=$?
  check "--emit-digest in a read-only folder: exit 1, reason" '[[ $rc -eq 1 ]] && grep -q "Permission denied" "$T/err"'
fi
# a good run writes all of them
"$Z" run "$M" --quiet --microbatch 8 --emit-ids "$T/ids" --emit-digest "$T/d.txt" --metrics-out "$T/m.json" > "$T/out" 2>"$T/err"; rc=$?
check "all outputs written: exit 0" '[[ $rc -eq 0 ]] && [[ $(wc -l < "$T/ids/rank-0.ids") -eq 1600 ]] && [[ $(wc -l < "$T/d.txt") -eq 200 ]]'
check "metrics of a whole run say partial false" \
  'python3 -c "import json,sys; d=json.load(open(\"$T/m.json\")); sys.exit(0 if d[\"partial\"] is False and \"signal\" not in d else 1)"'

# 2. signals: 1600 samples, 4 per batch, 50 ms per step: about 20 s of run
for sig in INT TERM; do
  [[ $sig == INT ]] && want=130 || want=143
  rm -rf "$T/sids" "$T/sd.txt" "$T/sm.json"
  "$Z" run "$M" --quiet --threads 2 --microbatch 4 --step-time 0.05 --emit-ids "$T/sids" \
    --emit-digest "$T/sd.txt" --metrics-out "$T/sm.json" --json > "$T/sout" 2>"$T/serr" &
  pid=$!
  sleep 0.7
  t0=$(date +%s%N)
  kill -s $sig $pid
  # wait at most 5 s (the check asks for 1)
  for _ in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  t1=$(date +%s%N)
  kill -0 $pid 2>/dev/null && { kill -9 $pid; bad "SIG$sig: still running after 5 s"; }
  wait $pid; rc=$?
  ms=$(( (t1 - t0) / 1000000 ))
  check "SIG$sig: stopped within a second (${ms} ms)" '[[ $ms -lt 1000 ]]'
  check "SIG$sig: exit $want ($rc)" '[[ $rc -eq $want ]]'
  check "SIG$sig: the run was cut short" '[[ $(wc -l < "$T/sd.txt") -lt 400 && $(wc -l < "$T/sd.txt") -ge 1 ]]'
  check "SIG$sig: digest ends in a complete line" '[[ -z $(tail -c1 "$T/sd.txt") ]] && ! grep -qvE "^[0-9]+ [0-9]+ [0-9a-f]{16}$" "$T/sd.txt"'
  check "SIG$sig: ids end in a complete line, 4 per batch" \
    '[[ -z $(tail -c1 "$T/sids/rank-0.ids") ]] && [[ $(wc -l < "$T/sids/rank-0.ids") -eq $(( 4 * $(wc -l < "$T/sd.txt") )) ]]'
  check "SIG$sig: metrics parse and say partial, SIG$sig" \
    'python3 -c "import json,sys; d=json.load(open(\"$T/sm.json\")); sys.exit(0 if d[\"partial\"] is True and d[\"signal\"]==\"SIG$sig\" and d[\"metrics\"][\"batches\"]>=1 else 1)"'
  check "SIG$sig: summary says partial" \
    'python3 -c "import json,sys; d=json.loads(open(\"$T/sout\").read().splitlines()[-1]); sys.exit(0 if d[\"partial\"] and d[\"signal\"]==\"SIG$sig\" else 1)"'
  check "SIG$sig: stderr says what stopped it" 'grep -q "stopped by SIG$sig" "$T/serr"'
done
# a long --step-time sleep is interrupted too
"$Z" run "$M" --quiet --microbatch 4 --step-time 60 > "$T/sout" 2>"$T/serr" &
pid=$!
sleep 0.7
t0=$(date +%s%N); kill -s INT $pid
for _ in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
t1=$(date +%s%N); kill -0 $pid 2>/dev/null && kill -9 $pid
wait $pid; rc=$?
ms=$(( (t1 - t0) / 1000000 ))
check "--step-time 60 interrupted within a second (${ms} ms, exit $rc)" '[[ $ms -lt 1000 && $rc -eq 130 ]]'

finish
