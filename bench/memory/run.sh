#!/usr/bin/env bash
# The memory budget (issue 23 item 4; docs/pipeline.md, "Memory budget"):
# peak RSS against the budget for jsonl.zst, HDF5 and Megatron data at 1 and
# 2 threads, and throughput with against without the budget, in one run.
#
# Per format, `zephon run` over one epoch with the settings of
# tests/memory/test_memory_budget.sh (buffers that outgrow the budget without
# it), without a budget and with each budget of BUDGETS_<FORMAT>
# (K/M/G suffixes), the variants run in turn RUNS times; each row: the
# budget, the peak RSS of the process (VmHWM, the summary's peak_rss_bytes;
# the largest of the runs), peak RSS - budget (the documented constant
# ZP_MEMORY_OVERHEAD_BYTES bounds it), and samples/s (median of RUNS runs)
# as a ratio to the runs without a budget in the same rounds. Prints a
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

echo "| format | threads | budget | peak RSS | peak RSS - budget | samples/s | vs no budget |"
echo "|---|---|---|---|---|---|---|"
# row FORMAT THREADS BUDGETS ARGS...: RUNS rounds, each running every
# variant once (no budget first, then each budget), so that the machine's
# load changes every variant alike; the median samples/s and the largest
# peak RSS of each
row() {
  local fmt=$1 th=$2 budgets=$3; shift 3
  local res="$D/row.res" v
  : >"$res"
  for ((r = 0; r < RUNS; r++)); do
    for v in none $budgets; do
      if [[ $v == none ]]; then
        echo "$v $(one "$@" --threads "$th")" >>"$res"
      else
        echo "$v $(one "$@" --threads "$th" --memory-budget "$v")" >>"$res"
      fi
    done
  done
  python3 - "$fmt" "$th" "$res" none $budgets <<'PY'
import statistics, sys
fmt, th, res, variants = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = {}
for line in open(res):
    v, p, s = line.split()
    rows.setdefault(v, []).append((int(p), float(s)))
def size(v):
    return int(v[:-1]) << {"K": 10, "M": 20, "G": 30}[v[-1]]
base = statistics.median(s for _, s in rows["none"])
for v in variants:
    peak = max(p for p, _ in rows[v])
    rate = statistics.median(s for _, s in rows[v])
    over = "" if v == "none" else "%.1f MiB" % ((peak - size(v)) / 2**20)
    print("| %s | %s | %s | %.1f MiB | %s | %.0f | %.2f |" % (fmt, th, v, peak / 2**20, over, rate,
                                                         rate / base))
PY
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
