#!/usr/bin/env bash
# Checkpoint states at 1,000 mixture parts and 10^9 samples (save, a restore
# deep into the run, a 64-rank job state merged and restored on 64 and on
# 48 ranks, a 1,024-rank job state merged: time, CPU time, peak memory) and
# the mixture's selection cost per sample, in one run
# (BENCH_STATE_ONLY=merge: the merges only)
# (bench/state/bench_state.c says what each figure measures).
#   bench/state/run.sh [BUILD_DIR]        (default build/release)
# CMAKE_ARGS="..." adds options to the configure step (for example
# -DCMAKE_C_COMPILER=clang); BENCH_STATE_DUMP=FOLDER keeps the states.
# Builds bench_state (Release), writes its 1,000 small shards and manifest
# under $TMPDIR (removed at the end), prints the table; then, when the tree
# has it, bench/mixture's figures for the bare schedule.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF ${CMAKE_ARGS:-} >/dev/null
cmake --build "$B" -j2 --target bench_state >/dev/null
"$B/bench_state"
if [[ -f bench/mixture/run.sh ]]; then
  echo
  echo "bench/mixture (the bare quota schedule):"
  bash bench/mixture/run.sh "$B"
fi
