#!/usr/bin/env bash
# test_preprocess_parts.sh ZEPHON - `zephon preprocess` on a shard read in
# several parts (about 4 MiB each) with several threads: the feeder thread,
# the team's blocks cut across parts and the parts handed back, under TSan
# in .ci/run (label tsan). A plain and a seekable zstd shard of about 12 MB,
# each its own run, give at 3 threads the files of 1 thread byte for byte.
# (One shard a run: the team of a second shard reuses libgomp's pool
# threads, whose hand-over TSan cannot see. test_preprocess.sh, 3c, runs
# shards of several parts in one run at 1 and 3 threads.)
set -u
Z=${1:?usage: test_preprocess_parts.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"

"$Z" gen --out "$T/p" --format jsonl --shards 1 --bytes 12M --seed 8 >/dev/null || bad "gen plain"
"$Z" gen --out "$T/z" --shards 1 --bytes 12M --seed 9 >/dev/null || bad "gen seekable"
for d in p z; do
  for th in 1 3; do
    "$Z" preprocess --quiet --out "$T/o$d$th" --format megatron --threads $th "$T/$d" \
      >"$T/out" 2>&1 || bad "$d: preprocess, $th threads: $(cat "$T/out")"
  done
  same=1
  for g in "$T/o${d}1"/*; do cmp -s "$g" "$T/o${d}3/$(basename "$g")" || same=0; done
  check "$d: a shard of several parts: the files of 3 threads are those of 1" \
    '[[ $same == 1 ]] && ls "$T/o${d}1"/*.bin >/dev/null 2>&1'
done
finish
