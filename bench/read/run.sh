#!/usr/bin/env bash
# Read-path benchmark: the pipeline without tokenization against the raw
# read rate of `zstd -dc` over the same files, measured in one run.
#   bench/read/run.sh [BUILD_DIR] [GB]
# Generates (once) a JSONL.zst dataset of GB gigabytes uncompressed
# (default 1.1) under bench/out/read-data, then prints:
#   - zstd -dc over all shards (one thread, output to /dev/null): MB/s
#   - zephon run, 1 thread, no tokenize, shuffled: samples/s, MB/s
#   - zephon run, 2 threads, fetch parallelism 2: samples/s, MB/s
#   - the ratios pipeline / zstd -dc
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
GB=${2:-1.1}
if [[ ! -x $B/zephon ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
  cmake --build "$B" -j2 >/dev/null
fi
Z=$B/zephon
D=bench/out/read-data
bytes=$(python3 -c "print(int($GB*1e9))")
if [[ ! -f $D/manifest.json ]]; then
  rm -rf "$D"
  "$Z" gen --out "$D" --shards 24 --bytes "$bytes" --seed 1 >/dev/null
fi
files=$(ls "$D"/*.jsonl.zst)
comp=$(cat $files | wc -c)
# warm the page cache so both sides read from memory
cat $files >/dev/null
t0=$(date +%s.%N); zstd -dc $files >/dev/null; t1=$(date +%s.%N)
out=$(zstd -dc $files | wc -c)
zt=$(python3 -c "print($t1-$t0)")
r1=$("$Z" run "$D/manifest.json" --quiet --json --threads 1 --microbatch 32)
r2=$("$Z" run "$D/manifest.json" --quiet --json --threads 2 --fetch-parallelism 2 --microbatch 32)
python3 - "$out" "$comp" "$zt" "$r1" "$r2" <<'PY'
import json,sys
out,comp,zt=int(sys.argv[1]),int(sys.argv[2]),float(sys.argv[3])
r1,r2=json.loads(sys.argv[4]),json.loads(sys.argv[5])
zmb=out/zt/1e6
print(f"dataset: {comp/1e9:.2f} GB compressed, {out/1e9:.2f} GB of JSONL, {r1['samples']} samples")
print(f"zstd -dc (1 thread):                 {zmb:8.1f} MB/s  ({zt:.2f} s)")
for name,r in (("zephon run, 1 thread, no tokenize:",r1),("zephon run, 2 threads, fetch x2:  ",r2)):
    print(f"{name}   {r['mb_per_s']:8.1f} MB/s  {r['samples_per_s']:10.0f} samples/s  ratio to zstd -dc {r['mb_per_s']/zmb:.2f}")
PY
