#!/usr/bin/env bash
# Remote storage figures, each a ratio measured in one run (docs/storage.md):
#  (a) samples/s of a tokenizing pipeline reading its shards over http
#      through a proxy that adds 50 ms to every request, with prefetch and
#      without, against the same pipeline on local files;
#  (b) download MB/s from nginx on loopback: Zephon's transfer engine
#      (bench_download) against the curl command, same files, same number
#      of transfers at once;
#  (c) bytes downloaded per epoch by a 4-rank job on one node sharing the
#      shard cache, against the dataset's size;
#  (d) with a cache limit of a quarter of the dataset, bytes downloaded per
#      epoch (epochs 2..E) under Belady eviction against LRU, same run.
#   bench/remote/run.sh [BUILD_DIR]     (servers: tests/net/servers.sh, own folder)
# SIZE_MB (default 480): the dataset, in 48 jsonl.zst shards. THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
if [[ ! -x $B/bench_download || ! -x $B/zephon ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
  cmake --build "$B" -j2 --target bench_download zephon_cli >/dev/null
fi
Z=$B/zephon
O=$(mktemp -d /tmp/zephon-bench-remote.XXXXXX)
NET=$O/net
cleanup() { bash tests/net/servers.sh stop "$NET" >/dev/null 2>&1 || true; rm -rf "$O"; }
trap cleanup EXIT
ZT_PROXY_DELAY_MS=50 bash tests/net/servers.sh start "$NET" >/dev/null
get() { sed -n "s/^$1=//p" "$NET/env" | head -n1; }
HTTP=$(get ZT_HTTP); PROXY=$(get ZT_PROXY); ROOT=$(get ZT_ROOT)
SIZE_MB=${SIZE_MB:-480}; THREADS=${THREADS:-2}
"$Z" gen --out "$ROOT/ds" --shards 48 --bytes "${SIZE_MB}M" --seed 5 --hash >/dev/null
chmod -R a+rX "$ROOT/ds"
DS_BYTES=$(stat -c %s "$ROOT"/ds/shard-*.jsonl.zst | awk '{s+=$1} END {print s}')
echo "dataset: 48 shards, $((DS_BYTES / 1000000)) MB compressed; proxy adds 50 ms to every request"
stats() { curl -s "$PROXY/__stats"; }
reset() { curl -s -X POST "$PROXY/__reset" >/dev/null; }
get_bytes() { stats | python3 -c "import json,sys;d=json.load(sys.stdin);print(sum(v for k,v in d.get('bytes',{}).items() if '/ds/shard-' in k))"; }
sps() { python3 -c "import json,sys;print(json.loads(sys.stdin.read().strip().splitlines()[-1])['samples_per_s'])"; }
RUN="--quiet --json --threads $THREADS --tokenize gpt2:$THREADS --fetch-parallelism 2 --seq-len 2048 --microbatch 8"

echo; echo "(a) samples/s: local vs over http with 50 ms per request (fresh cache each run);"
echo "    every shard request waits 50 ms at the proxy, which then redirects (307) to nginx: the"
echo "    bytes do not go through the Python proxy, which would share these 2 cores with the run"
python3 - "$ROOT/ds/manifest.json" "$PROXY" > "$O/redirect.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for s in m["shards"]:
    s["name"] = s["path"]; s["path"] = sys.argv[2] + "/f/redirect*0/ds/" + s["path"]
print(json.dumps(m))
PY
"$Z" run "$ROOT/ds/manifest.json" $RUN >/dev/null  # warm the page cache and the vocabulary
ra=(); rn=()
for round in 1 2 3; do
  l=$("$Z" run "$ROOT/ds/manifest.json" $RUN | sps)
  p=$("$Z" run "$O/redirect.json" $RUN --prefetch 20000:4 --cache-dir "$O/ca$round" | sps)
  n=$("$Z" run "$O/redirect.json" $RUN --cache-dir "$O/cb$round" | sps)
  rm -rf "$O/ca$round" "$O/cb$round"
  python3 -c "l,p,n=$l,$p,$n;print(f'  round {$round}: local {l:.0f}  remote+prefetch {p:.0f} ({p/l:.2f} of local)  remote without prefetch {n:.0f} ({n/l:.2f})')"
  ra+=("$(python3 -c "print($p/$l)")"); rn+=("$(python3 -c "print($n/$l)")")
done
python3 -c "import statistics as s;a=[$(IFS=,; echo "${ra[*]}")];n=[$(IFS=,; echo "${rn[*]}")];print(f'  median: remote+prefetch {s.median(a):.2f} of local, without prefetch {s.median(n):.2f}')"

echo; echo "(b) download throughput from nginx on loopback: the dataset 3 times over, 4 transfers at once;"
echo "    7 rounds, the two sides alternating"
urls=(); for k in 1 2 3; do for f in "$ROOT"/ds/shard-*.jsonl.zst; do urls+=("$HTTP/ds/$(basename "$f")"); done; done
VOL=$((3 * DS_BYTES))
rb=(); zs=(); cs=()
for round in 1 2 3 4 5 6 7; do
  mkdir -p "$O/dz" "$O/dc"
  t0=$(date +%s%N); "$B/bench_download" "$O/dz" 4 "${urls[@]}" >/dev/null; t1=$(date +%s%N)
  z=$(python3 -c "print($VOL / (($t1 - $t0) / 1e9) / 1e6)")
  cargs=(); i=0; for u in "${urls[@]}"; do cargs+=(-o "$O/dc/$i" "$u"); i=$((i + 1)); done
  t0=$(date +%s%N); curl -s --no-progress-meter --parallel --parallel-max 4 "${cargs[@]}"; t1=$(date +%s%N)
  c=$(python3 -c "print($VOL / (($t1 - $t0) / 1e9) / 1e6)")
  cmp -s "$O/dz/0" "$ROOT/ds/shard-00000.jsonl.zst" || { echo "bench_download: wrong bytes"; exit 1; }
  rm -rf "$O/dz" "$O/dc"
  zs+=("$z"); cs+=("$c"); rb+=("$(python3 -c "print($z/$c)")")
  python3 -c "print(f'  round $round: zephon {$z:.0f} MB/s  curl {$c:.0f} MB/s  ratio {$z/$c:.2f}')"
done
python3 -c "import statistics as s;z=[$(IFS=,; echo "${zs[*]}")];c=[$(IFS=,; echo "${cs[*]}")];r=[$(IFS=,; echo "${rb[*]}")];print(f'  median: zephon {s.median(z):.0f} MB/s  curl {s.median(c):.0f} MB/s  ratio of medians {s.median(z)/s.median(c):.2f}  median ratio {s.median(r):.2f}')"

echo; echo "(c) bytes downloaded per epoch, 4 ranks on one node sharing the cache"
if command -v mpirun >/dev/null; then
  reset
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader \
    mpirun -np 4 --oversubscribe --bind-to none "$Z" run "$PROXY/ds/manifest.json" --quiet --threads 1 \
    --prefetch 5000:2 --cache-dir "$O/cmpi" >/dev/null
  got=$(get_bytes)
  python3 -c "print(f'  downloaded {$got/1e6:.1f} MB for a {$DS_BYTES/1e6:.1f} MB dataset: {$got/$DS_BYTES:.3f}x')"
  rm -rf "$O/cmpi"
fi

echo; echo "(d) a cache limit of a quarter of the dataset (here 128 smaller shards, so that a quarter"
echo "    holds more than a shuffle block's working set), 4 epochs, the decoded-shard memory cache off"
echo "    (--cache-mb 0): bytes downloaded per epoch after the first, Belady against LRU"
"$Z" gen --out "$ROOT/ds2" --shards 128 --bytes "$((SIZE_MB / 2))M" --seed 5 --hash >/dev/null
chmod -R a+rX "$ROOT/ds2"
DS2=$(stat -c %s "$ROOT"/ds2/shard-*.jsonl.zst | awk '{s+=$1} END {print s}')
limit=$((DS2 / 4))
get_bytes2() { stats | python3 -c "import json,sys;d=json.load(sys.stdin);print(sum(v for k,v in d.get('bytes',{}).items() if '/ds2/shard-' in k))"; }
for pol in belady lru; do
  reset
  "$Z" run "$PROXY/ds2/manifest.json" --quiet --threads 2 --epochs 4 --cache-dir "$O/cd-$pol" \
    --cache-limit $limit --cache-policy $pol --cache-mb 0 --prefetch 2000:2 2>/dev/null >/dev/null
  all=$(get_bytes2)
  eval "d_$pol=\$(( (all - DS2) / 3 ))"
  rm -rf "$O/cd-$pol"
done
python3 -c "b,l,d=$d_belady,$d_lru,$DS2;print(f'  dataset {d/1e6:.1f} MB, limit {d/4e6:.1f} MB: belady {b/1e6:.1f} MB/epoch ({b/d:.2f} of the dataset)  lru {l/1e6:.1f} MB/epoch ({l/d:.2f})  belady/lru {b/l:.2f}')"
