#!/usr/bin/env bash
# The coverage certificate's cost, in one run (bench_coverage.c explains the
# columns): the per-batch fold and the end-of-run digests against the run.
#   bench/coverage/run.sh [BUILD_DIR]      ROUNDS=N (default 5), WORLD=W (default 1 and 4)
# Generates bench/out/coverage: about 120 MB of JSONL in 8 jsonl.zst shards
# (zephon gen, about 60 000 documents).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build}
if [[ ! -x $B/bench_coverage ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$B" -j2 --target bench_coverage zephon_cli >/dev/null
fi
D=bench/out/coverage
if [[ ! -f $D/manifest.json ]]; then
  mkdir -p "$D"
  "$B/zephon" gen --out "$D" --shards 8 --bytes 120M --seed 7 >/dev/null
fi
for w in ${WORLD:-1 4}; do
  echo "as rank 0 of $w:"
  "$B/bench_coverage" "$D/manifest.json" "${ROUNDS:-5}" "$w"
done
