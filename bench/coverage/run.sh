#!/usr/bin/env bash
# The coverage certificate's cost: `zephon run` with it (the default: the
# per-batch fold plus, at the end, each finished epoch's plan and stream
# digests) against --no-coverage, in one run, rounds alternating, medians
# of wall seconds (these machines are noisy: compare within one run).
#   bench/coverage/run.sh [BUILD_DIR]      ROUNDS=N (default 7)
# Two pipelines over a generated dataset (about 120 MB of JSONL in 8
# jsonl.zst shards, 2 epochs): records (no tokenizer: the cheapest
# pipeline, where the certificate weighs most) and gpt2 + concat packing.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build}
Z=$B/zephon
ROUNDS=${ROUNDS:-7}
D=bench/out/coverage
if [[ ! -f $D/manifest.json ]]; then
  mkdir -p "$D"
  "$Z" gen --out "$D" --shards 8 --bytes 120M --seed 7 >/dev/null
fi
wall() { # seconds of one run
  local t0 t1
  t0=$(date +%s.%N)
  "$Z" run "$D/manifest.json" --quiet --threads 2 --epochs 2 "$@" >/dev/null
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
printf '%-22s %12s %14s %8s\n' pipeline "with (s)" "without (s)" cost
for mode in records gpt2-concat; do
  extra=()
  [[ $mode == gpt2-concat ]] && extra=(--tokenize gpt2 --pack concat --seq-len 2048 --microbatch 8)
  wall "${extra[@]}" >/dev/null # warm the page cache and the index store
  on=(); off=()
  for ((i = 0; i < ROUNDS; i++)); do
    on+=("$(wall "${extra[@]}")")
    off+=("$(wall "${extra[@]}" --no-coverage)")
  done
  a=$(printf '%s\n' "${on[@]}" | median)
  b=$(printf '%s\n' "${off[@]}" | median)
  printf '%-22s %12.4f %14.4f %7.2f%%\n' "$mode" "$a" "$b" "$(echo "($a - $b) / $b * 100" | bc -l)"
done
"$Z" run "$D/manifest.json" --quiet --threads 2 --epochs 2 | grep coverage
