#!/usr/bin/env bash
# test_segments_cli.sh ZEPHON - shards read by segments (docs/datasets.md
# "Segments") end to end with `zephon run`:
#  1. plain .jsonl, seekable .jsonl.zst (`zephon gen`'s default) and
#     single-frame .jsonl.zst (--single-frame) of several segments each:
#     every sample exactly once (one rank and three ranks);
#  2. the delivered batches (digests) are the same whatever the cache
#     budget, threads, parallelism and prefetch; seekable and single-frame
#     shards of the same records and segments give the same batches;
#     a run resumed from a checkpoint mid-round continues it exactly; a
#     resume with other segments is refused;
#  3. `zephon convert --seekable` keeps the records byte for byte and makes
#     a file read frame by frame; a damaged seek table is an error naming
#     the file;
#  4. (with `rss`) memory follows the segment: peak RSS of a block of 4
#     shards of 16 MB (plain) with segments of 2 MiB stays well under that
#     of whole shards; `zephon preprocess` of a 128 MB shard peaks where
#     one of 32 MB does.
set -u
Z=${1:?usage: test_segments_cli.sh PATH_TO_ZEPHON [rss]}
. "$(dirname "$0")/../testlib.sh"

# rss: only part 4 (a test of its own, not run under sanitizers, whose
# shadow memory and quarantine make RSS meaningless)
if [[ ${2:-} == rss ]]; then
  "$Z" gen --out "$T/big" --format jsonl --shards 4 --bytes 64M --seed 2 >/dev/null || bad "gen big"
  rss() { /usr/bin/time -f %M "$Z" run "$T/big" --quiet --block-shards 4 --cache-mb 0 "$@" 2>&1 >/dev/null | tail -1; }
  whole=$(rss --segment-mb whole); seg=$(rss --segment-mb 2)
  echo "# peak RSS: whole shards $whole KiB, segments of 2 MiB $seg KiB"
  check "peak RSS with segments ($seg KiB) under 60% of whole shards' ($whole KiB)" \
    '[[ $seg =~ ^[0-9]+$ && $whole =~ ^[0-9]+$ && $((seg * 10)) -lt $((whole * 6)) ]]'
  # preprocess reads a shard in parts: its peak RSS for one shard of 128 MB
  # is that for one of 32 MB, give or take 16 MB (it held whole shards)
  "$Z" gen --out "$T/pp32" --format jsonl --shards 1 --bytes 32M --seed 3 >/dev/null || bad "gen 32M"
  "$Z" gen --out "$T/pp128" --format jsonl --shards 1 --bytes 128M --seed 3 >/dev/null || bad "gen 128M"
  pp_rss() { /usr/bin/time -f %M "$Z" preprocess --quiet --no-progress --threads 2 --out "$T/ppo-$1" "$T/pp$1" 2>&1 >/dev/null | tail -1; }
  r32=$(pp_rss 32); r128=$(pp_rss 128)
  echo "# preprocess peak RSS: shard of 32 MB $r32 KiB, of 128 MB $r128 KiB"
  check "preprocess: peak RSS for a 128 MB shard ($r128 KiB) within 16 MB of a 32 MB shard's ($r32 KiB)" \
    '[[ $r32 =~ ^[0-9]+$ && $r128 =~ ^[0-9]+$ && $r128 -lt $((r32 + 16384)) ]]'
  finish
  exit
fi

"$Z" gen --out "$T/plain" --format jsonl --shards 4 --bytes 12M --seed 4 >/dev/null || bad "gen plain"
"$Z" gen --out "$T/seek" --shards 4 --bytes 12M --seed 4 >/dev/null || bad "gen seekable"
"$Z" gen --out "$T/single" --single-frame --shards 4 --bytes 12M --seed 4 >/dev/null || bad "gen single"
total=$(python3 -c "import json;print(sum(s['samples'] for s in json.load(open('$T/plain/manifest.json'))['shards']))")
SEG="--segment-mb 1 --block-shards 4 --seed 9"

# 1. exactly once
for f in plain seek single; do
  for W in 1 3; do
    rm -rf "$T/ids"
    for ((r=0; r<W; r++)); do
      "$Z" run "$T/$f" --quiet $SEG --rank $r --world-size $W --remainder drop --emit-ids "$T/ids" \
        >/dev/null 2>"$T/err" || { bad "$f run rank $r/$W"; cat "$T/err"; }
    done
    n=$(cat "$T"/ids/rank-*.ids | wc -l); u=$(cat "$T"/ids/rank-*.ids | sort -u | wc -l)
    check "$f W=$W: every sample once ($u distinct of $n, total $total)" \
      '[[ $n -eq $u && $((total - n)) -lt $W ]]'
  done
done

# 2. digests independent of budget, threads, parallelism, prefetch
for f in plain seek single; do
  ref=""
  for cfg in "--cache-mb 0 --threads 1" "--cache-mb 4096 --threads 2 --fetch-parallelism 2" \
             "--cache-mb 1 --threads 2 --prefetch 2000:2" "--threads 2 --chunk-samples 7"; do
    "$Z" run "$T/$f" --quiet $SEG $cfg --microbatch 8 --emit-digest "$T/d.txt" >/dev/null 2>"$T/err" \
      || { bad "$f run $cfg"; cat "$T/err"; }
    h=$(sha256sum < "$T/d.txt")
    [[ -z "$ref" ]] && ref=$h
    check "$f: digest equal with $cfg" '[[ "$h" == "$ref" ]]'
  done
  eval "ref_$f=\$ref"
done
check "seekable and single-frame shards deliver the same batches" '[[ "$ref_seek" == "$ref_single" ]]'
"$Z" run "$T/seek" --quiet --seed 9 --block-shards 4 --segment-mb whole --microbatch 8 \
  --emit-digest "$T/dw.txt" >/dev/null 2>&1 || bad "run whole shards"
check "whole shards: another (documented) order" '[[ "$(sha256sum < "$T/dw.txt")" != "$ref_seek" ]]'

# 2b. a checkpoint mid-round: the first 60 batches and the resumed rest are
# the uninterrupted run; another segment size is refused (another plan)
common=(--quiet $SEG --microbatch 8)
"$Z" run "$T/single" "${common[@]}" --emit-digest "$T/full.txt" >/dev/null 2>&1 || bad "full run"
"$Z" run "$T/single" "${common[@]}" --max-batches 60 --save-state "$T/s.json" \
  --emit-digest "$T/part1.txt" >/dev/null 2>&1 || bad "first part"
"$Z" run "$T/single" "${common[@]}" --threads 2 --resume "$T/s.json" --emit-digest "$T/part2.txt" \
  >/dev/null 2>&1 || bad "resumed part"
check "resumed mid-round: the two parts are the uninterrupted run" \
  'cmp -s <(cut -d" " -f2- "$T/full.txt") <(cat "$T/part1.txt" "$T/part2.txt" | cut -d" " -f2-)'
"$Z" run "$T/single" --quiet --segment-mb 2 --block-shards 4 --seed 9 --microbatch 8 \
  --resume "$T/s.json" >/dev/null 2>"$T/err"; rc=$?
check "resume with other segments refused (rc $rc)" '[[ $rc -ne 0 ]]'

# 3. conversion, damaged seek table
mkdir -p "$T/c0" "$T/c1" "$T/c2"
cp "$T/single/shard-00000.jsonl.zst" "$T/c0/a.jsonl.zst"
cp "$T/plain/shard-00000.jsonl" "$T/c2/a.jsonl"
"$Z" convert --seekable --frame-mb 1 "$T/c0/a.jsonl.zst" "$T/c1/a.jsonl.zst" || bad "convert single-frame"
"$Z" convert --seekable "$T/c2/a.jsonl" "$T/conv.jsonl.zst" || bad "convert plain"
# the records in order, whole shards: the same batches from each file
for d in c0 c1 c2; do
  "$Z" run "$T/$d" --quiet --no-shuffle --segment-mb whole --microbatch 8 --emit-digest "$T/$d.txt" \
    >/dev/null 2>&1 || bad "run $d"
done
check "convert keeps the records (one frame -> seekable)" 'cmp -s "$T/c0.txt" "$T/c1.txt"'
check "the records of the plain and zst shards are the same" 'cmp -s "$T/c0.txt" "$T/c2.txt"'
mv "$T/conv.jsonl.zst" "$T/c2/a.jsonl.zst"; rm "$T/c2/a.jsonl"
"$Z" run "$T/c2" --quiet --no-shuffle --segment-mb 1 --microbatch 8 --emit-digest "$T/c3.txt" \
  >/dev/null 2>&1 || bad "run converted plain"
check "convert keeps the records (jsonl -> seekable, read by segments)" 'cmp -s "$T/c0.txt" "$T/c3.txt"'
check "the converted file ends with the seekable magic number" \
  '[[ "$(tail -c 4 "$T/c1/a.jsonl.zst" | od -An -tx1 | tr -d " ")" == "b1ea928f" ]]'
"$Z" convert "$T/a" "$T/b" >/dev/null 2>&1; rc=$?
check "convert without --seekable: usage error" '[[ $rc -eq 2 ]]'
mkdir -p "$T/bad"
cp "$T/seek/shard-00000.jsonl.zst" "$T/bad/x.jsonl.zst"
cp "$T/seek/shard-00001.jsonl.zst" "$T/bad/y.jsonl.zst"
"$Z" index -o "$T/bad/manifest.json" "$T/bad/x.jsonl.zst" "$T/bad/y.jsonl.zst" >/dev/null 2>&1 || bad "index"
# reserved bits in the seek table's descriptor (the 5th byte from the end)
sz=$(stat -c %s "$T/bad/y.jsonl.zst")
printf '\x7c' | dd of="$T/bad/y.jsonl.zst" bs=1 seek=$((sz - 5)) conv=notrunc status=none
"$Z" run "$T/bad/manifest.json" --quiet --segment-mb 1 >/dev/null 2>"$T/err"; rc=$?
check "damaged seek table: run fails (rc $rc)" '[[ $rc -ne 0 ]]'
check "damaged seek table: the message names the file and the table" \
  'grep -q "y.jsonl.zst" "$T/err" && grep -q "seek table" "$T/err"'

# 4. a manifest's content hash is checked for shards read by segments: one
# letter of a text value changed (same size, same records, valid JSON)
mkdir -p "$T/h"
cp "$T/plain/shard-00001.jsonl" "$T/h/a.jsonl"
"$Z" index --hash -o "$T/h/manifest.json" "$T/h/a.jsonl" >/dev/null 2>&1 || bad "index --hash"
"$Z" run "$T/h/manifest.json" --quiet --segment-mb 1 >/dev/null 2>"$T/err" || bad "hashed run"
python3 - "$T/h/a.jsonl" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
i = b.index(b'"text"', len(b) * 2 // 3) + 12
while not chr(b[i]).isalpha():
    i += 1
b[i] = ord('x') if b[i] != ord('x') else ord('y')
open(p, 'wb').write(b)
PY
"$Z" run "$T/h/manifest.json" --quiet --segment-mb 1 >/dev/null 2>"$T/err"; rc=$?
check "changed shard read by segments: run fails (rc $rc)" '[[ $rc -ne 0 ]]'
check "changed shard read by segments: content hash mismatch named" \
  'grep -q "a.jsonl.*content hash mismatch" "$T/err"'

finish
