#!/usr/bin/env bash
# bench/formats/run.sh [BUILD_DIR] - the HDF5 and token formats, measured in
# one run (docs/formats.md, "Benchmarks"):
#   (a) the pipeline reading a fixed-shape float32 HDF5 dataset of 1 GiB
#       (record mode, [256, 1024] arrays per batch), in order and shuffled,
#       against the HDF5 C API reading it in 64 MiB hyperslabs;
#   (b) training (concat packing, seq_len 2048) from pre-tokenized shards
#       (HDF5 and Megatron .bin/.idx, written by `zephon preprocess`)
#       against JSONL.zst with tokenization on the fly, samples/s;
#   (c) `zephon preprocess` MB/s of JSONL in, per thread, at 1 and 2
#       threads, against the encoder's speed (bench/preprocess/run.sh).
# BUILD_DIR defaults to build/release (configured Release when missing).
# MB=64: text for (b) (bench/tokenizer/gen_text.mjs, needs node); ROWS=262144
# and COLS=1024 for (a); ROUNDS=3; THREADS=2. Data under BUILD_DIR/bench-formats.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
if [[ ! -f $B/CMakeCache.txt ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$B" -j2 --target bench_formats zephon_cli >/dev/null
Z=$B/zephon
D=$B/bench-formats
mkdir -p "$D"
export ROUNDS=${ROUNDS:-3} THREADS=${THREADS:-2}

echo "== (a) fixed-shape HDF5 through the pipeline vs the HDF5 C API"
"$B/bench_formats" fixed "$D/features.h5" "${ROWS:-262144}" "${COLS:-1024}"

echo
echo "== the HDF5 lock: a chunked, compressed dataset (read through H5Dread), 1 and 2 fetch tasks"
"$B/bench_formats" lock "$D/chunked.h5"
echo
echo "== variable-length text (heap objects read with pread), shuffled, record mode"
[[ -f $D/text.h5 ]] || "$Z" gen --format h5 --out "$D/text.h5" --bytes 200M --features 0 >/dev/null
"$Z" run "$D/text.h5" --quiet --microbatch 64 --threads 2 --json | python3 -c \
  'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print("%.0f records/s, %.1f MB/s of text rows" % (d["samples"]/d["seconds"], d["mb_per_s"]))' \
  || echo "(zephon run --json gave no summary)"

echo
echo "== (b) training from pre-tokenized shards vs JSONL.zst + tokenize"
mb=${MB:-64}
if [[ ! -f $D/text-$mb/manifest.json ]]; then
  command -v node >/dev/null || { echo "run.sh: (b) needs node (bench/tokenizer/gen_text.mjs)" >&2; exit 1; }
  rm -rf "$D/text-$mb" && mkdir -p "$D/text-$mb"
  node bench/tokenizer/gen_text.mjs "$D/text-$mb/all.jsonl" "$mb" >/dev/null
  (cd "$D/text-$mb" && split -n l/8 -d -a 2 all.jsonl part- && rm all.jsonl &&
   for f in part-??; do zstd -q -3 --rm "$f" -o "$f.jsonl.zst"; done)
  "$Z" index -o "$D/text-$mb/manifest.json" "$D/text-$mb/*.jsonl.zst" >/dev/null
fi
for fmt in h5 megatron; do
  if [[ ! -f $D/tok-$mb-$fmt/manifest.json ]]; then
    rm -rf "$D/tok-$mb-$fmt"
    "$Z" preprocess --format "$fmt" --out "$D/tok-$mb-$fmt" --no-progress \
      "$D/text-$mb/manifest.json" >/dev/null
  fi
done
"$B/bench_formats" tokens "$D/text-$mb/manifest.json" "$D/tok-$mb-h5/manifest.json" \
  "$D/tok-$mb-megatron/manifest.json"

echo
echo "== (c) zephon preprocess against the encoder"
if [[ -x bench/preprocess/run.sh ]]; then
  bench/preprocess/run.sh "$B"
else
  echo "bench/preprocess/run.sh is missing"
fi
