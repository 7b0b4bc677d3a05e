#!/usr/bin/env bash
# test_preprocess_parts.sh ZEPHON - `zephon preprocess` on shards read in
# several parts (about 4 MiB each) with several threads: the feeder thread,
# the one team's blocks cut across parts and across the shards' ends, the
# parts handed back and each shard's output begun and committed by the
# puts, under TSan in .ci/run (label tsan). A plain and a seekable zstd
# shard of about 12 MB in one run give at 3 threads the files of 1 thread
# byte for byte.
set -u
Z=${1:?usage: test_preprocess_parts.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"

"$Z" gen --out "$T/p" --format jsonl --shards 1 --bytes 12M --seed 8 >/dev/null || bad "gen plain"
"$Z" gen --out "$T/z" --shards 1 --bytes 12M --seed 9 >/dev/null || bad "gen seekable"
mkdir -p "$T/in"
cp "$T"/p/*.jsonl "$T/in/a.jsonl"; cp "$T"/z/*.jsonl.zst "$T/in/b.jsonl.zst"
for th in 1 3; do
  "$Z" preprocess --quiet --out "$T/o$th" --format megatron --threads $th "$T/in/a.jsonl" "$T/in/b.jsonl.zst" \
    >"$T/out" 2>&1 || bad "preprocess, $th threads: $(cat "$T/out")"
done
same=1
for g in "$T"/o1/*; do cmp -s "$g" "$T/o3/$(basename "$g")" || same=0; done
check "two shards of several parts in one run: the files of 3 threads are those of 1" \
  '[[ $same == 1 && -s "$T/o1/a.bin" && -s "$T/o1/b.bin" ]]'
finish
