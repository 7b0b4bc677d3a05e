#!/usr/bin/env bash
# The main job, from a fresh Debian/Ubuntu machine:
#   tools/demo.sh [SHARD|GLOB|MANIFEST...]
# installs what is missing, builds Zephon (Release), generates a sample
# dataset when none is given (demo-data/, ~200 MB of JSONL.zst), and runs the
# default pipeline on it: jsonl.zst -> tokenize gpt2 -> packed batches of
# [8, 2048+1] tokens, printing the throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
Z=build/release/zephon
if [[ $# -eq 0 ]]; then
  if [[ ! -f demo-data/manifest.json ]]; then
    echo "demo: generating a sample dataset in demo-data/"
    "$Z" gen --out demo-data --shards 8 --bytes 200000000 --seed 1
  fi
  set -- demo-data/manifest.json
fi
threads=$(nproc)
echo "demo: zephon run $* --tokenize gpt2:$threads --threads $threads --seq-len 2048 --microbatch 8"
"$Z" run "$@" --tokenize "gpt2:$threads" --threads "$threads" --seq-len 2048 --microbatch 8
