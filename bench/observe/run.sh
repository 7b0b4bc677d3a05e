#!/usr/bin/env bash
# Observability overhead: end-to-end throughput with observability on vs off,
# measured in one run by alternating the two (off, on, off, on, ...) over the
# same data, so that machine noise hits both alike.
#   bench/observe/run.sh [BUILD_DIR] [ROUNDS]
# Two pipelines are measured: the read path alone (no tokenize: the most
# sensitive to per-record costs) and jsonl.zst -> tokenize gpt2 -> packed
# batches. Prints the median samples/s of each side and the ratio on/off,
# then the instruction counts (callgrind) of a small run off and on.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
ROUNDS=${2:-7}
if [[ ! -x $B/zephon ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
  cmake --build "$B" -j2 >/dev/null
fi
Z=$B/zephon
D=bench/out/observe-data-64
if [[ ! -f $D/manifest.json ]]; then
  "$Z" gen --out "$D" --shards 64 --bytes 300M --seed 2 >/dev/null
fi
measure() { # label, args...
  local label=$1; shift
  local off=() on=()
  "$Z" run "$D/manifest.json" --quiet "$@" >/dev/null   # warm-up: page cache, CPU clocks
  for ((i = 0; i < ROUNDS; i++)); do
    off+=("$("$Z" run "$D/manifest.json" --quiet --json "$@" | python3 -c 'import json,sys;print(json.loads(sys.stdin.read().strip().splitlines()[-1])["samples_per_s"])')")
    on+=("$("$Z" run "$D/manifest.json" --quiet --json --observe=0 "$@" | python3 -c 'import json,sys;print(json.loads(sys.stdin.read().strip().splitlines()[-1])["samples_per_s"])')")
  done
  python3 - "$label" "${off[*]}" "${on[*]}" <<'PY'
import statistics,sys
label=sys.argv[1]; off=[float(x) for x in sys.argv[2].split()]; on=[float(x) for x in sys.argv[3].split()]
mo,mn=statistics.median(off),statistics.median(on)
print(f"{label}: off {mo:,.0f} samples/s, on {mn:,.0f} samples/s (median of {len(off)}), on/off = {mn/mo:.3f}")
PY
}
measure "read path (1 thread, no tokenize)       " --threads 1
measure "tokenize gpt2 -> packed (2 threads)     " --threads 2 --tokenize gpt2:2 --seq-len 2048 --microbatch 8

# Wall clocks on a shared VM wander by several percent between runs; the
# instruction count (callgrind, deterministic) of the same small run with
# observability off and on gives the cost without that noise.
if command -v valgrind >/dev/null; then
  S=bench/out/observe-small
  [[ -f $S/manifest.json ]] || "$Z" gen --out "$S" --shards 16 --bytes 20M --seed 5 >/dev/null
  count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$Z" run "$S/manifest.json" \
      --quiet --threads 1 --no-index-store "$@" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
  }
  off=$(count) on=$(count --observe=0)
  toff=$(count --tokenize gpt2:1 --seq-len 2048) ton=$(count --tokenize gpt2:1 --seq-len 2048 --observe=0)
  python3 - "$off" "$on" "$toff" "$ton" <<'PY'
import sys
off,on,toff,ton=map(int,sys.argv[1:])
print(f"instructions, read path (20 MB, 1 thread):  off {off:,}  on {on:,}  on/off = {on/off:.4f}")
print(f"instructions, tokenize (20 MB, 1 thread):   off {toff:,}  on {ton:,}  on/off = {ton/toff:.4f}")
PY
fi
