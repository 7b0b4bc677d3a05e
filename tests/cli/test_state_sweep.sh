#!/usr/bin/env bash
# test_state_sweep.sh ZEPHON - what saves killed while writing leave beside
# the state file is removed by a later save, and nothing else is
# (src/base/fsio.h):
#  1. planted beside STATE: a temporary of a dead process of this host, one
#     of a live process, one of another host, an older mkstemp-style name
#     and one of another final name; `zephon run --save-state STATE` removes
#     the first only; `zephon state merge -o` sweeps its output's too;
#  2. ten kill -9s of runs saving after every batch (--save-every 1), then
#     one run that saves: no temporary of a dead process is left, and the
#     state is whole (it resumes).
set -u
Z=$(realpath "${1:?usage: test_state_sweep.sh PATH_TO_ZEPHON}")
. "$(dirname "$0")/../testlib.sh"
export XDG_CACHE_HOME="$T/cache"

"$Z" gen --out "$T/a" --shards 2 --samples-per-shard 400 --seed 1 >/dev/null || { echo "FAIL - gen"; exit 1; }
host=$(uname -n | tr -c 'A-Za-z0-9_\n-' '-' | head -c 64)
# a dead pid: a child that exited
sh -c 'exit 0' & dead=$!; wait $dead
live=$$
d="$T/st"; mkdir -p "$d"
dead_tmp="STATE.json.zptmp.$host.$dead.0badf00d"
live_tmp="STATE.json.zptmp.$host.$live.0badf00d"
other_host="STATE.json.zptmp.x$host.$dead.0badf00d"
old_style="STATE.json.tmp.AbC123"
other_final="OTHER.json.zptmp.$host.$dead.0badf00d"
for f in "$dead_tmp" "$live_tmp" "$other_host" "$old_style" "$other_final"; do echo junk > "$d/$f"; done

"$Z" run --data "$T/a" --microbatch 8 --max-batches 3 --quiet --save-state "$d/STATE.json" \
  >/dev/null 2>"$T/err"; rc=$?
check "a run with --save-state (rc $rc)" '[[ $rc -eq 0 && -s "$d/STATE.json" ]]' || cat "$T/err"
check "the dead process's temporary is removed" '[[ ! -e "$d/$dead_tmp" ]]'
check "a live process's temporary is kept" '[[ -e "$d/$live_tmp" ]]'
check "another host's temporary is kept" '[[ -e "$d/$other_host" ]]'
check "a name the project did not make is kept" '[[ -e "$d/$old_style" ]]'
check "another file's temporary is kept" '[[ -e "$d/$other_final" ]]'

# zephon state merge -o OTHER.json sweeps OTHER.json's
"$Z" state merge -o "$d/OTHER.json" "$d/STATE.json" >/dev/null 2>"$T/err"; rc=$?
check "zephon state merge -o (rc $rc)" '[[ $rc -eq 0 && -s "$d/OTHER.json" ]]' || cat "$T/err"
check "merge -o removes its dead temporary" '[[ ! -e "$d/$other_final" ]]'

# 2. kill -9 during saves after every batch
k="$T/kill"; mkdir -p "$k"
for i in $(seq 10); do
  "$Z" run --data "$T/a" --microbatch 4 --quiet --save-state "$k/S.json" --save-every 1 \
    --epochs 100 >/dev/null 2>&1 &
  pid=$!
  sleep 0.$((RANDOM % 3 + 2))
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
done
echo junk > "$k/S.json.zptmp.$host.$dead.00c0ffee" # at least one, whatever the kills hit
"$Z" run --data "$T/a" --microbatch 4 --quiet --resume "$k/S.json" --save-state "$k/S.json" \
  --max-batches 2 >/dev/null 2>"$T/err"; rc=$?
check "a run resumes from the state the killed runs left and saves (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/err"
check "no temporary of the killed runs is left ($(ls "$k" | tr '\n' ' '))" \
  '[[ -z $(ls "$k" | grep zptmp) ]]'
finish
