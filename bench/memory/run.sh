#!/usr/bin/env bash
# The memory budget (issue 23 item 4; docs/pipeline.md, "Memory budget"):
# peak RSS against the budget for jsonl.zst, HDF5 and Megatron data at 1 and
# 2 threads, and throughput with against without the budget, in one run.
#
# Per format, `zephon run` over one epoch with the settings of
# tests/memory/test_memory_budget.sh (buffers that outgrow the budget without
# it), once without a budget and once per budget of BUDGETS_<FORMAT>; each
# row: the budget, the peak RSS of the process (VmHWM, the summary's
# peak_rss_bytes), peak RSS - budget (the documented constant
# ZP_MEMORY_OVERHEAD_BYTES bounds it), and samples/s (median of RUNS runs)
# as a ratio to the run without a budget measured alongside. Prints a
# Markdown table.
#   bench/memory/run.sh [ZEPHON] [DIR]
# ZEPHON: default build/zephon; DIR: where the data go (default a new
# folder under ${TMPDIR:-/tmp}, kept). THREADS ("1 2"), RUNS (3),
# ZST_BYTES (96M of JSONL; the Megatron pairs are made from it),
# H5_BYTES (64M), BUDGETS_ZST ("16M 64M"), BUDGETS_MEGATRON ("8M 32M"),
# BUDGETS_HDF5 ("24M 64M").
set -euo pipefail
cd "$(dirname "$0")/../.."
Z=$(realpath "${1:-build/zephon}")
D=${2:-$(mktemp -d "${TMPDIR:-/tmp}/zp-bench-memory.XXXXXX")}
THREADS=${THREADS:-"1 2"}; RUNS=${RUNS:-3}
mkdir -p "$D"
[[ -f "$D/zst/manifest.json" ]] ||
  "$Z" gen --out "$D/zst" --shards 64 --bytes "${ZST_BYTES:-96M}" --format jsonl.zst --seed 5 >/dev/null
[[ -f "$D/mg/manifest.json" ]] ||
  "$Z" preprocess --out "$D/mg" --format megatron "$D/zst" >/dev/null 2>&1
have_h5=1
[[ -f "$D/d.h5" ]] ||
  "$Z" gen --format h5 --out "$D/d.h5" --bytes "${H5_BYTES:-64M}" --features 64 >/dev/null 2>&1 ||
  have_h5=0

# one run: prints "peak_rss_bytes samples_per_s"
one() {
  "$Z" run "$@" --quiet --json --no-coverage |
    python3 -c 'import json,sys; d=json.loads(sys.stdin.readline()); print(d["peak_rss_bytes"], d["samples_per_s"])'
}
# median over RUNS runs of samples/s, the largest peak RSS
measure() {
  local peaks=() rates=()
  for ((r = 0; r < RUNS; r++)); do
    read -r p s < <(one "$@")
    peaks+=("$p"); rates+=("$s")
  done
  python3 - "${peaks[*]}" "${rates[*]}" <<'PY'
import statistics, sys
p = [int(x) for x in sys.argv[1].split()]
s = [float(x) for x in sys.argv[2].split()]
print(max(p), statistics.median(s))
PY
}

echo "| format | threads | budget | peak RSS | peak RSS - budget | samples/s | vs no budget |"
echo "|---|---|---|---|---|---|---|"
row() { # FORMAT THREADS BUDGETS ARGS...
  local fmt=$1 th=$2 budgets=$3; shift 3
  local base_p base_s
  read -r base_p base_s < <(measure "$@" --threads "$th")
  awk -v f="$fmt" -v t="$th" -v p="$base_p" -v s="$base_s" \
    'BEGIN { printf "| %s | %s | none | %.1f MiB | | %.0f | 1.00 |\n", f, t, p / 1048576, s }'
  for b in $budgets; do
    local p s bytes
    read -r p s < <(measure "$@" --threads "$th" --memory-budget "$b")
    bytes=$(numfmt --from=iec "$b")
    awk -v f="$fmt" -v t="$th" -v b="$b" -v bytes="$bytes" -v p="$p" -v s="$s" -v s0="$base_s" \
      'BEGIN { printf "| %s | %s | %s | %.1f MiB | %.1f MiB | %.0f | %.2f |\n", f, t, b,
               p / 1048576, (p - bytes) / 1048576, s, s / s0 }'
  done
}
for th in $THREADS; do
  row jsonl.zst "$th" "${BUDGETS_ZST:-16M 64M}" "$D/zst" --tokenize gpt2 --microbatch 8 --block-shards 2
  row megatron "$th" "${BUDGETS_MEGATRON:-8M 32M}" "$D/mg" --tokenize gpt2 --microbatch 8 --block-shards 2
  if ((have_h5)); then
    row hdf5 "$th" "${BUDGETS_HDF5:-24M 64M}" "$D/d.h5" --microbatch 64 --chunk-samples 2048 \
      --fetch-parallelism 16
  fi
done
echo
echo "data: $D"
