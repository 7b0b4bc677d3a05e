#!/usr/bin/env bash
# test_remote_cache.sh ZEPHON [MPIEXEC] - the shard cache on disk in runs:
#  1. with a limit, the folder (complete files and downloads in progress)
#     never holds more than the limit plus the documented in-flight
#     allowance (one shard per fetch task), sampled while the run goes;
#  2. kill -9 in the middle of downloads, then a restart: no partial or
#     corrupt file is served (same ids as local), stale files cleaned;
#  3. 4 ranks under mpirun sharing one cache folder: each shard downloaded
#     exactly once on the node (counted by the proxy).
set -u
Z=${1:?usage: test_remote_cache.sh PATH_TO_ZEPHON [MPIEXEC]}
MPIEXEC=${2:-}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rcache

make_ds rcache 12 80
RUN="--quiet --seed 6 --threads 2 --microbatch 8"
"$Z" run "$ROOT/rcache/manifest.json" $RUN --epochs 2 --emit-ids "$T/local" >/dev/null || bad "local run"
ids_of "$T/local/rank-0.ids" > "$T/local.ids"
largest=$(stat -c %s "$ROOT"/rcache/shard-*.jsonl.zst | sort -n | tail -1)
total=$(stat -c %s "$ROOT"/rcache/shard-*.jsonl.zst | awk '{s+=$1} END {print s+0}')

# 1. the limit: a third of the dataset (at least 3 of the largest shard), two epochs
limit=$(( total / 3 )); (( limit < 3 * largest )) && limit=$(( 3 * largest ))
allow=$(( 1 * largest ))
mkdir -p "$T/c1"
"$Z" run "$PROXY/rcache/manifest.json" $RUN $FAST --epochs 2 --cache-dir "$T/c1" --cache-limit $limit \
  --prefetch 300:3 --emit-ids "$T/lim" >"$T/lim.out" 2>&1 &
pid=$!
max=0
while kill -0 $pid 2>/dev/null; do
  b=$( (cd "$T/c1" && find . -maxdepth 1 -type f -name '*-shard-*' -printf '%s\n' 2>/dev/null) | awk '{s+=$1} END {print s+0}')
  (( ${b:-0} > max )) && max=${b:-0}
  sleep 0.02
done
wait $pid; rc=$?
check "limited run completes (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/lim.out"
ids_of "$T/lim/rank-0.ids" > "$T/lim.ids"
check "limited run: same ids over 2 epochs" 'cmp -s "$T/local.ids" "$T/lim.ids"'
check "cache never above limit + allowance (max $max, limit $limit + $allow)" '[[ $max -le $((limit + allow)) ]]'
end=$( (cd "$T/c1" && find . -maxdepth 1 -type f -name '*-shard-*' -printf '%s\n') | awk '{s+=$1} END {print s+0}')
check "cache at the end within the limit ($end <= $limit)" '[[ ${end:-0} -le $limit ]]'

# 2. kill -9 during downloads (each slowed by the proxy), then a restart
proxy_manifest rcache "stall:20000*0" > "$T/slow.json"
"$Z" run "$T/slow.json" $RUN --cache-dir "$T/c2" --prefetch 300:4 --low-speed-time 30 >/dev/null 2>&1 &
pid=$!
for i in $(seq 1 100); do ls "$T/c2" 2>/dev/null | grep -q '\.part' && break; sleep 0.05; done
check "downloads were in progress when killed" 'ls "$T/c2" | grep -q "\.part"'
sleep 0.3
kill -9 $pid; wait $pid 2>/dev/null
check "no complete-named file is partial after kill -9" \
  '[[ $(ls "$T/c2" | grep -v "\.part\|\.lock\|^\." | wc -l) -eq 0 ]]'
proxy_manifest rcache > "$T/fast.json"
"$Z" run "$T/fast.json" $RUN --epochs 2 --cache-dir "$T/c2" $FAST --emit-ids "$T/restart" >"$T/restart.out" 2>&1 ||
  { bad "restart after kill -9"; cat "$T/restart.out"; }
ids_of "$T/restart/rank-0.ids" > "$T/restart.ids"
check "restart: same ids as local" 'cmp -s "$T/local.ids" "$T/restart.ids"'
check "restart: stale temporary files cleaned" '[[ $(ls -a "$T/c2" | grep -c "\.part") -eq 0 ]]'

# 3. four ranks on one node share the cache: one download per shard
if [[ -n "$MPIEXEC" ]]; then
  proxy_reset
  # under ASan: Open MPI's allocations kept until exit are suppressed by
  # library name, as in the other MPI tests (tests/mpi/lsan.supp)
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader \
    ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 \
    LSAN_OPTIONS=suppressions=$HERE/../mpi/lsan.supp:print_suppressions=0 \
    timeout 120 "$MPIEXEC" -np 4 --oversubscribe --bind-to none "$Z" run "$PROXY/rcache/manifest.json" \
    --quiet --seed 6 --threads 1 --microbatch 8 $FAST --cache-dir "$T/c3" --prefetch 200:2 \
    --emit-ids "$T/mpi" --report "$T/rep" >"$T/mpi.out" 2>&1 || { bad "4-rank run"; tail -20 "$T/mpi.out"; }
  uniq=$(cat "$T"/mpi/rank-*.ids 2>/dev/null | sort -u | wc -l)
  check "4 ranks: every sample delivered ($uniq)" '[[ $uniq -eq 960 ]]'
  read -r shards gets maxget <<<"$(proxy_stats | python3 -c "
import json,sys
d=json.load(sys.stdin)['GET']; v=[n for k,n in d.items() if '/rcache/shard-' in k]
print(len(v), sum(v), max(v) if v else 0)")"
  check "4 ranks: each of the 12 shards downloaded exactly once ($shards shards, $gets GETs, max $maxget)" \
    '[[ $shards -eq 12 && $gets -eq 12 ]]'
  # the cluster report: each rank's transfer time; the downloads (12) and
  # cache hits + misses over the ranks (every rank read its shards)
  read -r ntrans dls <<<"$(python3 -c "
import json
d=json.load(open('$T/rep/report.json'))
r=d['ranks']
print(sum(1 for x in r if x.get('transfer_s',0) > 0), sum(x.get('downloads',0) for x in r))" 2>/dev/null)"
  check "4 ranks: the report has transfer time (${ntrans:-?} ranks with transfers) and 12 downloads (${dls:-?})" \
    '[[ ${ntrans:-0} -ge 1 && ${dls:-0} -eq 12 ]]'
fi
finish
