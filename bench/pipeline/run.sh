#!/usr/bin/env bash
# End-to-end text pipeline vs tokenizer-only throughput, in one run.
#   bench/pipeline/run.sh [BUILD_DIR] [DATASET_MANIFEST]
# Without a dataset, generates bench/out/e2e-data-400 (~400 MB of JSONL.zst).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
if [[ ! -x $B/bench_e2e ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
  cmake --build "$B" -j2 --target bench_e2e zephon_cli >/dev/null
fi
M=${2:-}
if [[ -z $M ]]; then
  M=bench/out/e2e-data-400/manifest.json
  [[ -f $M ]] || "$B/zephon" gen --out bench/out/e2e-data-400 --shards 8 --bytes 400M --seed 3 >/dev/null
fi
"$B/bench_e2e" "$M" 3
