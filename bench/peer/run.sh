#!/usr/bin/env bash
# Shards shared between nodes (docs/storage.md, "Shards from other nodes"),
# on emulated nodes (ZEPHON_EMULATED_NODES) of one machine, 8 ranks under
# mpirun (oversubscribed), every figure from one run of this script:
#  (a) bytes from storage (nginx's access log) for 1, 4 and 8 emulated
#      nodes, a job of 2 epochs, a cache limit that holds the dataset,
#      against the dataset's size (goal: at most 1.05x for the job whatever
#      the node count), with and without the sharing (ZEPHON_PEER=0);
#  (b) eviction with a quarter-dataset limit, one node of 4 ranks, one
#      epoch and two: bytes from storage per epoch by the node's order, by
#      each rank's own order (ZEPHON_NODE_ORDER=0) and by LRU
#      (--cache-policy lru);
#  (c) samples/s of 8 emulated nodes (a tokenizing pipeline) reading through
#      a proxy that adds 50 ms to every request, against the same job on
#      local files (goal >= 0.9), with and without the sharing; on shards
#      of about 1.6 MB (C_SHARDS 64 x C_SAMPLES 2000) and of about 160 kB
#      (64 x 200). The three jobs of a size run in turn PASSES times (3):
#      each figure is the job's fastest pass, so that a pass slowed by this
#      shared machine (its disk, other guests) does not decide the ratio.
#   bench/peer/run.sh [BUILD_DIR]   (servers: tests/net/servers.sh, own folder)
# CACHE_ROOT: where the jobs' cache folder is made (default: the run's
# own folder, on this machine's disk). The emulated nodes of one machine
# share its one disk, where real nodes each write to their own:
# CACHE_ROOT=/dev/shm measures the sharing without that contention.
# SHARDS (default 256) x SAMPLES (default 20) samples for (a) and (b);
# PREFETCH (400:8) for (c).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
if [[ ! -x $B/zephon ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
  cmake --build "$B" -j2 --target zephon_cli >/dev/null
fi
Z=$(realpath "$B/zephon")
O=$(mktemp -d /tmp/zephon-bench-peer.XXXXXX)
NET=$O/net
CACHE=$O/cache
[[ -n ${CACHE_ROOT:-} ]] && CACHE=$(mktemp -d "$CACHE_ROOT/zephon-bench-peer-cache.XXXXXX")
cleanup() {
  bash tests/net/servers.sh stop "$NET" >/dev/null 2>&1 || true
  rm -rf "$O"
  [[ -z ${CACHE_ROOT:-} ]] || rm -rf "$CACHE"
}
trap cleanup EXIT
ZT_PROXY_DELAY_MS=50 bash tests/net/servers.sh start "$NET" >/dev/null
get() { sed -n "s/^$1=//p" "$NET/env" | head -n1; }
HTTP=$(get ZT_HTTP); PROXY=$(get ZT_PROXY); ROOT=$(get ZT_ROOT)
LOG=$NET/logs/nginx-access.log
SHARDS=${SHARDS:-256}; SAMPLES=${SAMPLES:-20}; PREFETCH=${PREFETCH:-400:8}; C_SHARDS=${C_SHARDS:-64}; C_SAMPLES=${C_SAMPLES:-2000}
PASSES=${PASSES:-3}
"$Z" gen --out "$ROOT/ds" --shards "$SHARDS" --samples-per-shard "$SAMPLES" --seed 5 --hash >/dev/null
"$Z" gen --out "$ROOT/big" --shards "$C_SHARDS" --samples-per-shard "$C_SAMPLES" --seed 5 --hash >/dev/null
"$Z" gen --out "$ROOT/small" --shards "$C_SHARDS" --samples-per-shard $((C_SAMPLES / 10)) --seed 5 --hash >/dev/null
chmod -R a+rX "$ROOT/ds" "$ROOT/big" "$ROOT/small"
DS=$(cat "$ROOT"/ds/shard-*.jsonl.zst | wc -c)
echo "dataset: $SHARDS shards x $SAMPLES samples, $DS bytes; 8 ranks unless said, 2 epochs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 \
  OMPI_MCA_btl=self,vader OMPI_MCA_mpi_yield_when_idle=1
# job NP NODES URL ARGS...: the job's wall seconds on stdout; its shard
# bytes from storage (nginx log, after the job) in $O/bytes
job() {
  local np=$1 nodes=$2 url=$3; shift 3
  local cache=$CACHE/c
  rm -rf "$cache"
  local before; before=$(wc -l < "$LOG")
  local t0; t0=$(date +%s.%N)
  ZEPHON_EMULATED_NODES=$nodes timeout 600 mpirun -np "$np" --oversubscribe --bind-to none \
    "$Z" run "$url" --seed 3 --threads 1 --microbatch 8 --epochs "${EPOCHS:-2}" --cache-dir "$cache" "$@" \
    > "$O/out" 2>&1 || { echo "job failed:" >&2; tail -5 "$O/out" >&2; exit 1; }
  local t1; t1=$(date +%s.%N)
  sleep 0.2
  tail -n +$((before + 1)) "$LOG" | grep -F "GET /ds/shard-" | awk '{s+=$10} END {print s+0}' > "$O/bytes" || true
  python3 -c "print($t1 - $t0)"
}
per_epoch() { python3 -c "print('%.3f' % ($(cat "$O/bytes") / ${EPOCHS:-2} / $DS))"; }
job_x() { python3 -c "print('%.3f' % ($(cat "$O/bytes") / $DS))"; }

echo "(a) bytes from storage for the job (2 epochs) / dataset, cache holding the dataset:"
for n in 1 4 8; do
  job 8 "$n" "$HTTP/ds/manifest.json" >/dev/null
  printf "    %d emulated node(s): %sx" "$n" "$(job_x)"
  ZEPHON_PEER=0 job 8 "$n" "$HTTP/ds/manifest.json" >/dev/null
  printf "   (without the sharing: %sx)\n" "$(job_x)"
done

Q=$((DS / 4))
for ep in 1 2; do
  echo "(b) quarter-dataset limit, 1 node of 4 ranks, $ep epoch(s): bytes from storage per epoch / dataset:"
  EPOCHS=$ep job 4 1 "$HTTP/ds/manifest.json" --cache-limit "$Q" >/dev/null; node=$(EPOCHS=$ep per_epoch)
  EPOCHS=$ep ZEPHON_NODE_ORDER=0 job 4 1 "$HTTP/ds/manifest.json" --cache-limit "$Q" >/dev/null
  own=$(EPOCHS=$ep per_epoch)
  EPOCHS=$ep job 4 1 "$HTTP/ds/manifest.json" --cache-limit "$Q" --cache-policy lru >/dev/null
  lru=$(EPOCHS=$ep per_epoch)
  echo "    node's order ${node}x, each rank's own order ${own}x, LRU ${lru}x"
done

TOK=(--prefetch "$PREFETCH" --tokenize gpt2:1 --seq-len 512)
for d in big small; do
  samples=$C_SAMPLES; [[ $d == small ]] && samples=$((C_SAMPLES / 10))
  echo "(c) samples/s, 8 emulated nodes, tokenizing (gpt2), prefetch $PREFETCH, 2 epochs of" \
    "$C_SHARDS shards x $samples samples ($(cat "$ROOT"/$d/shard-*.jsonl.zst | wc -c) bytes)," \
    "fastest of $PASSES passes:"
  tl=(); tr=(); tn=()
  for ((p = 0; p < PASSES; p++)); do
    tl+=("$(job 8 8 "$ROOT/$d/manifest.json" "${TOK[@]}")")
    tr+=("$(job 8 8 "$PROXY/$d/manifest.json" "${TOK[@]}")")
    tn+=("$(ZEPHON_PEER=0 job 8 8 "$PROXY/$d/manifest.json" "${TOK[@]}")")
  done
  python3 - "$((C_SHARDS * samples * 2))" "${tl[*]}" "${tr[*]}" "${tn[*]}" <<'PY'
import sys
n = int(sys.argv[1])
tl, tr, tn = ([float(x) for x in a.split()] for a in sys.argv[2:5])
def f(t): return "%.2f" % t
print("    local files %.0f samples/s (%s s; passes %s)" % (n / min(tl), f(min(tl)), " ".join(map(f, tl))))
print("    through the 50 ms proxy, sharing %.0f samples/s (%s s; passes %s): %.2fx of local files"
      % (n / min(tr), f(min(tr)), " ".join(map(f, tr)), min(tl) / min(tr)))
print("    through the 50 ms proxy, without sharing %.0f samples/s (%s s; passes %s): %.2fx"
      % (n / min(tn), f(min(tn)), " ".join(map(f, tn)), min(tl) / min(tn)))
PY
done
