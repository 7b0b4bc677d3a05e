#!/usr/bin/env bash
# End-to-end text pipeline vs tokenizer-only throughput, in one run.
#   bench/pipeline/run.sh [BUILD_DIR] [DATASET_MANIFEST]
# Without a dataset, generates bench/out/e2e-real: 200 MB of the tokenizer
# benchmark's English-heavy text (needs node), in 8 jsonl.zst shards.
# The manifest has hashes, so every load checks its shard (as real runs
# with `zephon index --hash` do). ROUNDS=N: medians of N rounds (default 5).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
if [[ ! -x $B/bench_e2e ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
  cmake --build "$B" -j2 --target bench_e2e zephon_cli >/dev/null
fi
M=${2:-}
if [[ -z $M ]]; then
  # The tokenizer benchmark's English-heavy mixed text (Zipf-distributed
  # GPT-2 words, code, multilingual lines), 200 MB in 8 jsonl.zst shards.
  D=bench/out/e2e-real
  M=$D/manifest.json
  if [[ ! -f $M ]]; then
    mkdir -p "$D"
    node bench/tokenizer/gen_text.mjs "$D/all.jsonl" 200 >/dev/null
    (cd "$D" && split -n l/8 -d -a 2 all.jsonl part- && rm all.jsonl &&
     for f in part-??; do zstd -q -3 --rm "$f" -o "$f.jsonl.zst"; done)
    "$B/zephon" index --hash -o "$M" "$D/*.jsonl.zst" >/dev/null
  fi
fi
"$B/bench_e2e" "$M" "${ROUNDS:-5}"
