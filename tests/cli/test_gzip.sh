#!/usr/bin/env bash
# test_gzip.sh ZEPHON - gzip shards (.jsonl.gz, .json.gz; docs/formats.md
# "gzip") end to end with the zephon command:
#  1. the same records as .jsonl, .jsonl.gz, .json.gz and .jsonl.zst give the
#     same samples (ids) and batches (digests), in record mode and with
#     --tokenize gpt2, at 1 and 3 ranks; `zephon index` counts them;
#  2. a multi-member file (cat a.gz b.gz c.gz, one member empty) and a BGZF
#     (bgzip) file read as the whole, also by segments;
#  3. shards larger than one segment (--segment-mb 1): every sample once at
#     1 and 3 ranks, digests independent of threads and cache, a run
#     resumed mid-round continues it exactly, in order they are the
#     .jsonl's records (the decoder's restarts: test_segments);
#  4. truncated, corrupt, bad-CRC, bad-ISIZE, garbage after a member, not
#     gzip: failed runs whose message names the shard and the fault (whole
#     loads, and the segment reader of a file changed after indexing); a
#     manifest's content hash is checked;
#  5. `zephon preprocess` reads them (the same token shards as from
#     .jsonl.zst); `zephon convert --seekable` reads them;
#  3b (after 3). http shards through the disk cache, whole and by segments;
#  6. `zephon tokenize` reads gzip (a file, members on standard input).
set -u
Z=${1:?usage: test_gzip.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
command -v gzip >/dev/null || { echo "gzip not found"; exit 1; }

# 3 shards of ~2 MB of JSONL: one segment each by default (under 2 MiB stored
# compressed, under 8 MiB plain), so every format has the same plan
"$Z" gen --out "$T/plain" --format jsonl --shards 3 --bytes 6M --seed 4 >/dev/null || bad "gen"
mkdir -p "$T/gz" "$T/jgz" "$T/zst"
for f in "$T"/plain/*.jsonl; do
  b=$(basename "$f" .jsonl)
  gzip -6 -c "$f" > "$T/gz/$b.jsonl.gz"
  gzip -9 -c "$f" > "$T/jgz/$b.json.gz"
  zstd -q --single-thread -c "$f" > "$T/zst/$b.jsonl.zst"
done
rm -f "$T/plain/manifest.json"
total=$(cat "$T"/plain/*.jsonl | wc -l)

# 1. the same samples and batches
for d in plain gz jgz zst; do
  "$Z" index -o "$T/$d.json" "$T/$d" >"$T/out" 2>&1 || { bad "index $d"; cat "$T/out"; }
  n=$(python3 -c "import json;print(sum(s['samples'] for s in json.load(open('$T/$d.json'))['shards']))")
  check "index $d: $n samples, the lines of the JSONL ($total)" '[[ $n -eq $total ]]'
done
for W in 1 3; do
  for d in plain gz jgz zst; do
    rm -rf "$T/ids"
    for ((r=0; r<W; r++)); do
      "$Z" run "$T/$d.json" --quiet --seed 3 --rank $r --world-size $W --microbatch 8 \
        --emit-ids "$T/ids" --emit-digest "$T/rec-$d-$W.txt" >/dev/null 2>"$T/err" \
        || { bad "$d run rank $r/$W"; cat "$T/err"; }
      "$Z" run "$T/$d.json" --quiet --seed 3 --rank $r --world-size $W --microbatch 4 \
        --tokenize gpt2 --seq-len 127 --emit-digest "$T/tok-$d-$W.txt" >/dev/null 2>"$T/err" \
        || { bad "$d tokenize run rank $r/$W"; cat "$T/err"; }
    done
    # shard names differ by suffix: compare shard index:record
    cat "$T"/ids/rank-*.ids | sed 's/^[^:]*\///' | sed 's/\.json[l]*\(\.gz\|\.zst\)\?:/:/' \
      > "$T/ids-$d-$W.txt"
    n=$(wc -l < "$T/ids-$d-$W.txt"); u=$(sort -u "$T/ids-$d-$W.txt" | wc -l)
    check "$d W=$W: every sample once ($u distinct of $n, total $total)" \
      '[[ $n -eq $u && $n -ge $total && $((n - total)) -lt $W ]]'
  done
  for d in gz jgz zst; do
    check "$d W=$W: the same sample ids as .jsonl" 'cmp -s "$T/ids-plain-$W.txt" "$T/ids-$d-$W.txt"'
    same=1
    for f in "$T"/rec-plain-$W.txt*; do cmp -s "$f" "${f/rec-plain/rec-$d}" || same=0; done
    check "$d W=$W: the same record batches as .jsonl" '[[ $same -eq 1 ]]'
    same=1
    for f in "$T"/tok-plain-$W.txt*; do cmp -s "$f" "${f/tok-plain/tok-$d}" || same=0; done
    check "$d W=$W: the same gpt2 token batches as .jsonl" '[[ $same -eq 1 ]]'
  done
done
# a glob of .jsonl.gz files as the positional argument
"$Z" run "$T/gz/*.jsonl.gz" --quiet --seed 3 --microbatch 8 --emit-digest "$T/glob.txt" \
  >/dev/null 2>"$T/err" || { bad "run a glob of .jsonl.gz"; cat "$T/err"; }
check "a glob of .jsonl.gz: the same batches" 'cmp -s "$T/glob.txt" "$T/rec-plain-1.txt"'

# 2. multi-member (a shard of ~8 MB of JSONL: several segments of 1 MiB)
"$Z" gen --out "$T/bigp" --format jsonl --shards 3 --bytes 24M --seed 5 >/dev/null || bad "gen big"
mkdir -p "$T/mm"
f0="$T/bigp/shard-00000.jsonl"
n0=$(wc -l < "$f0")
{ head -n 100 "$f0" | gzip -c; sed -n "101,$((n0 / 2))p" "$f0" | gzip -1 -c;
  printf '' | gzip -c; tail -n +$((n0 / 2 + 1)) "$f0" | gzip -9 -c; } > "$T/mm/shard-00000.jsonl.gz"
gzip -6 -c "$f0" > "$T/mm/one.jsonl.gz"
for s in shard-00000 one; do
  "$Z" run "$T/mm/$s.jsonl.gz" --quiet --no-shuffle --microbatch 8 --emit-digest "$T/mm-$s.txt" \
    >/dev/null 2>"$T/err" || { bad "run multi-member $s"; cat "$T/err"; }
done
check "a file of 4 members (one empty) gives the records of the one-member file" \
  'cmp -s "$T/mm-shard-00000.txt" "$T/mm-one.txt"'
# bgzip's layout (BGZF: members of at most 64 KiB, each with an extra field
# "BC" giving its size, and an empty member at the end), written here
python3 - "$f0" "$T/mm/bgzf.jsonl.gz" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
def member(chunk):
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = c.compress(chunk) + c.flush()
    bsize = 18 + len(body) + 8 - 1
    hdr = b'\x1f\x8b\x08\x04' + b'\0\0\0\0' + b'\x00\xff' + struct.pack('<H', 6) + b'BC' \
        + struct.pack('<HH', 2, bsize)
    return hdr + body + struct.pack('<II', zlib.crc32(chunk), len(chunk))
with open(sys.argv[2], 'wb') as out:
    for i in range(0, len(data), 65280):
        out.write(member(data[i:i + 65280]))
    out.write(member(b''))
PY
"$Z" run "$T/mm/bgzf.jsonl.gz" --quiet --no-shuffle --microbatch 8 --emit-digest "$T/mm-bgzf.txt" \
  >/dev/null 2>"$T/err" || { bad "run BGZF"; cat "$T/err"; }
check "a BGZF (bgzip) file of $(( $(stat -c %s "$f0") / 65280 + 2 )) members: the records of the one-member file" \
  'cmp -s "$T/mm-bgzf.txt" "$T/mm-one.txt"'
"$Z" run "$T/mm/shard-00000.jsonl.gz" --quiet --no-shuffle --segment-mb 1 --microbatch 8 \
  --emit-digest "$T/mm-seg.txt" >/dev/null 2>"$T/err" || { bad "multi-member by segments"; cat "$T/err"; }
check "the multi-member file read by segments: the same records in order" \
  'cmp -s <(cut -d" " -f2- "$T/mm-seg.txt") <(cut -d" " -f2- "$T/mm-one.txt")'

# 3. larger than one segment: 3 shards of ~8 MB of JSONL, ~3 MB gzip
mkdir -p "$T/big"
for f in "$T"/bigp/*.jsonl; do gzip -6 -c "$f" > "$T/big/$(basename "$f").gz"; done
"$Z" index -o "$T/big.json" "$T/big" >/dev/null 2>&1 || bad "index big"
btotal=$(cat "$T"/bigp/*.jsonl | wc -l)
SEG="--segment-mb 1 --block-shards 3 --seed 9"
for W in 1 3; do
  rm -rf "$T/ids"
  for ((r=0; r<W; r++)); do
    "$Z" run "$T/big.json" --quiet $SEG --rank $r --world-size $W --remainder drop \
      --emit-ids "$T/ids" >/dev/null 2>"$T/err" || { bad "segments run rank $r/$W"; cat "$T/err"; }
  done
  n=$(cat "$T"/ids/rank-*.ids | wc -l); u=$(cat "$T"/ids/rank-*.ids | sort -u | wc -l)
  check "segments W=$W: every sample once ($u distinct of $n, total $btotal)" \
    '[[ $n -eq $u && $((btotal - n)) -lt $W ]]'
done
ref=""
for cfg in "--cache-mb 0 --threads 1" "--cache-mb 4096 --threads 2 --fetch-parallelism 2" \
           "--threads 2 --chunk-samples 7"; do
  "$Z" run "$T/big.json" --quiet $SEG $cfg --microbatch 8 --emit-digest "$T/d.txt" \
    >/dev/null 2>"$T/err" || { bad "segments run $cfg"; cat "$T/err"; }
  h=$(sha256sum < "$T/d.txt")
  [[ -z "$ref" ]] && ref=$h
  check "segments: digest equal with $cfg" '[[ "$h" == "$ref" ]]'
done
"$Z" run "$T/big.json" --quiet $SEG --microbatch 8 --json --emit-digest "$T/full.txt" \
  >"$T/full.json" 2>/dev/null || bad "full run"
"$Z" run "$T/big.json" --quiet $SEG --microbatch 8 --max-batches 150 --save-state "$T/s.json" \
  --emit-digest "$T/part1.txt" >/dev/null 2>&1 || bad "first part"
"$Z" run "$T/big.json" --quiet $SEG --microbatch 8 --threads 2 --resume "$T/s.json" \
  --emit-digest "$T/part2.txt" >/dev/null 2>&1 || bad "resumed part"
check "segments: resumed mid-round, the two parts are the uninterrupted run" \
  'cmp -s <(cut -d" " -f2- "$T/full.txt") <(cat "$T/part1.txt" "$T/part2.txt" | cut -d" " -f2-)'
"$Z" run "$T/big.json" --quiet --segment-mb 1 --block-shards 3 --no-shuffle --microbatch 8 \
  --emit-digest "$T/seq.txt" >/dev/null 2>&1 || bad "segments in order"
"$Z" run "$T/bigp" --quiet --segment-mb whole --no-shuffle --microbatch 8 \
  --emit-digest "$T/seqp.txt" >/dev/null 2>&1 || bad "plain in order"
check "segments of the .jsonl.gz in order: the records of the .jsonl" 'cmp -s "$T/seq.txt" "$T/seqp.txt"'

# 3b. remote shards (http, through the disk cache): the same batches; read by
# segments from the cached file too
python3 - "$T" > "$T/port" 2>/dev/null <<'PY' &
import http.server, os, socketserver, sys
os.chdir(sys.argv[1])
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass
s = socketserver.TCPServer(("127.0.0.1", 0), Quiet)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
srv=$!
for _ in $(seq 50); do [[ -s "$T/port" ]] && break; sleep 0.1; done
U="http://127.0.0.1:$(cat "$T/port")"
"$Z" run "$U/gz/shard-00000.jsonl.gz" "$U/gz/shard-00001.jsonl.gz" "$U/gz/shard-00002.jsonl.gz" --quiet \
  --seed 3 --microbatch 8 --cache-dir "$T/dc" --emit-digest "$T/remote.txt" >/dev/null 2>"$T/err" \
  || { bad "remote run"; cat "$T/err"; }
check "http shards: the same batches as local .jsonl" 'cmp -s "$T/remote.txt" "$T/rec-plain-1.txt"'
"$Z" run "$U/big/shard-00000.jsonl.gz" --quiet --no-shuffle --segment-mb 1 --microbatch 8 \
  --cache-dir "$T/dc" --emit-digest "$T/remote-seg.txt" >/dev/null 2>"$T/err" \
  || { bad "remote run by segments"; cat "$T/err"; }
"$Z" run "$T/bigp/shard-00000.jsonl" --quiet --no-shuffle --microbatch 8 \
  --emit-digest "$T/local-seq.txt" >/dev/null 2>&1 || bad "local run in order"
check "an http shard of 3 segments read from the disk cache: its records in order" \
  'cmp -s "$T/remote-seg.txt" "$T/local-seq.txt"'
kill $srv 2>/dev/null; wait $srv 2>/dev/null

# 4. damaged files: named errors
mkdir -p "$T/bad"
good="$T/gz/shard-00001.jsonl.gz"
sz=$(stat -c %s "$good")
python3 - "$good" "$T/bad" <<'PY'
import sys
src, d = sys.argv[1], sys.argv[2]
b = open(src, 'rb').read()
open(d + '/trunc.jsonl.gz', 'wb').write(b[:len(b) // 2])
c = bytearray(b); c[len(b) // 3:len(b) // 3 + 8] = b'\xff' * 8
open(d + '/flipped.jsonl.gz', 'wb').write(c)
# a second member whose first deflate block has the reserved type 11
open(d + '/corrupt.jsonl.gz', 'wb').write(b + b'\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x07' + b'\x00' * 20)
c = bytearray(b); c[-6] ^= 0xff                     # CRC-32
open(d + '/crc.jsonl.gz', 'wb').write(c)
c = bytearray(b); c[-3] ^= 0x01                     # ISIZE
open(d + '/isize.jsonl.gz', 'wb').write(c)
open(d + '/garbage.jsonl.gz', 'wb').write(b + b'not gzip\n')
PY
cp "$T/plain/shard-00001.jsonl" "$T/bad/plain.jsonl.gz"
expect() { # FILE PATTERN DESCRIPTION
  local file=$1 pat=$2
  "$Z" run "$T/bad/$file.jsonl.gz" --quiet >/dev/null 2>"$T/err"; local rc=$?
  check "$file: run fails (rc $rc)" '[[ $rc -ne 0 ]]'
  check "$file: the message names the shard and $3" \
    'grep -q "$file.jsonl.gz" "$T/err" && grep -Eq "$pat" "$T/err"' || cat "$T/err"
}
expect trunc "truncated gzip file: it ends at compressed byte [0-9]+ inside member 1" "the offset"
expect corrupt "corrupt deflate data in gzip member 2 near compressed byte [0-9]+ \(decoded byte [0-9]+, after line [0-9]+\): invalid block" "member, offsets and line"
# 8 bytes overwritten in the deflate data: an invalid code, or valid codes
# that the trailer's CRC-32 refuses
expect flipped "(corrupt deflate data in gzip member 1|bad gzip trailer of member 1 .*) near compressed byte [0-9]+" "the offset"
expect crc "bad gzip trailer of member 1 .*near compressed byte $sz" "the trailer"
expect isize "bad gzip trailer of member 1" "the trailer"
expect garbage "garbage after gzip member 1: the bytes at compressed byte $sz are not a gzip header" "the offset"
expect plain "not a gzip file" "that it is not gzip"
# trailing zeros after the last member are garbage too
{ cat "$good"; head -c 64 /dev/zero; } > "$T/bad/zeros.jsonl.gz"
expect zeros "garbage after gzip member 1: the bytes at compressed byte $sz" "the offset"
# a header with a CRC-16 (FHCRC): accepted when right, refused when wrong
python3 - "$T/bad" <<'PY'
import struct, sys, zlib
data = b'{"text": "a"}\n'
c = zlib.compressobj(6, zlib.DEFLATED, -15)
body = c.compress(data) + c.flush()
hdr = b'\x1f\x8b\x08\x02\0\0\0\0\x00\xff'
tail = struct.pack('<II', zlib.crc32(data), len(data))
for name, k in (('hcrc', 0), ('badhcrc', 1)):
    crc = struct.pack('<H', (zlib.crc32(hdr) + k) & 0xffff)
    open(f'{sys.argv[1]}/{name}.jsonl.gz', 'wb').write(hdr + crc + body + tail)
PY
"$Z" run "$T/bad/hcrc.jsonl.gz" --quiet >/dev/null 2>"$T/err" || { bad "a right header CRC"; cat "$T/err"; }
expect badhcrc "bad header CRC in the gzip header of member 1 at compressed byte 0" "the header"
# a .json.gz holding one JSON array (not JSON Lines) is refused
printf '[{"text": "a"}, {"text": "b"}]\n' | gzip -c > "$T/bad/array.json.gz"
"$Z" run "$T/bad/array.json.gz" --quiet >/dev/null 2>"$T/err"; rc=$?
check "a .json.gz of one JSON array is refused (rc $rc), naming shard and line" \
  '[[ $rc -ne 0 ]] && grep -q "array.json.gz.* line 1 .*not an object" "$T/err"'
# the segment reader: files damaged after indexing (same size and count):
# a big member then a small one, whose first deflate block gets the
# reserved type 11
mkdir -p "$T/sb"
cp "$T/big/shard-00002.jsonl.gz" "$T/sb/a.jsonl.gz"
m1=$(stat -c %s "$T/sb/a.jsonl.gz")
python3 -c "import gzip,sys; sys.stdout.buffer.write(gzip.compress(b'{\"text\": \"last\"}\n', mtime=0))" \
  >> "$T/sb/a.jsonl.gz"
"$Z" index -o "$T/sb/m.json" "$T/sb/a.jsonl.gz" >/dev/null 2>&1 || bad "index sb"
bsz=$(stat -c %s "$T/sb/a.jsonl.gz")
cp "$T/sb/a.jsonl.gz" "$T/sb/orig.gz"
printf '\x07' | dd of="$T/sb/a.jsonl.gz" bs=1 seek=$((m1 + 10)) conv=notrunc status=none
"$Z" run "$T/sb/m.json" --quiet --segment-mb 1 >/dev/null 2>"$T/err"; rc=$?
check "segments: corrupt deflate data after indexing fails (rc $rc) naming shard and offset" \
  '[[ $rc -ne 0 ]] && grep -Eq "a.jsonl.gz.*corrupt deflate data in gzip member 2 near compressed byte [0-9]+ .*invalid block" "$T/err"'
cp "$T/sb/orig.gz" "$T/sb/a.jsonl.gz"
printf '\x00' | dd of="$T/sb/a.jsonl.gz" bs=1 seek=$((bsz - 8)) conv=notrunc status=none
"$Z" run "$T/sb/m.json" --quiet --segment-mb 1 >/dev/null 2>"$T/err"; rc=$?
check "segments: a bad CRC after indexing fails (rc $rc) naming the trailer" \
  '[[ $rc -ne 0 ]] && grep -q "a.jsonl.gz.*bad gzip trailer" "$T/err"' || cat "$T/err"
# the manifest's content hash (whole loads and segments)
cp "$T/sb/orig.gz" "$T/sb/a.jsonl.gz"
"$Z" index --hash -o "$T/sb/h.json" "$T/sb/a.jsonl.gz" >/dev/null 2>&1 || bad "index --hash"
"$Z" run "$T/sb/h.json" --quiet --segment-mb 1 >/dev/null 2>"$T/err" || { bad "hashed run"; cat "$T/err"; }
# same bytes decoded, another stored file: the header's OS byte
printf '\x07' | dd of="$T/sb/a.jsonl.gz" bs=1 seek=9 conv=notrunc status=none
for seg in 1 whole; do
  "$Z" run "$T/sb/h.json" --quiet --segment-mb $seg >/dev/null 2>"$T/err"; rc=$?
  check "content hash checked (--segment-mb $seg, rc $rc)" \
    '[[ $rc -ne 0 ]] && grep -q "a.jsonl.gz.*content hash mismatch" "$T/err"' || cat "$T/err"
done

# 5. preprocess and convert
"$Z" preprocess --quiet --out "$T/pp-gz" --tokenizer gpt2 "$T/gz/*.jsonl.gz" >"$T/out" 2>&1 \
  || { bad "preprocess .jsonl.gz"; cat "$T/out"; }
"$Z" preprocess --quiet --out "$T/pp-zst" --tokenizer gpt2 "$T/zst/*.jsonl.zst" >"$T/out" 2>&1 \
  || { bad "preprocess .jsonl.zst"; cat "$T/out"; }
for d in pp-gz pp-zst; do
  "$Z" run "$T/$d" --quiet --tokenize gpt2 --seq-len 127 --microbatch 4 --emit-digest "$T/$d.txt" \
    >/dev/null 2>"$T/err" || { bad "run $d"; cat "$T/err"; }
done
check "preprocess: .jsonl.gz in gives the token shards of .jsonl.zst in" \
  '[[ -s "$T/pp-gz.txt" ]] && cmp -s "$T/pp-gz.txt" "$T/pp-zst.txt"'
"$Z" convert --seekable --frame-mb 1 "$T/mm/shard-00000.jsonl.gz" "$T/conv.jsonl.zst" \
  >/dev/null 2>"$T/err" || { bad "convert .jsonl.gz"; cat "$T/err"; }
check "convert --seekable of a multi-member .jsonl.gz keeps the bytes" \
  'zstd -dc "$T/conv.jsonl.zst" | cmp -s - "$f0"'
# `zephon tokenize` reads gzip (file or standard input, every member)
"$Z" tokenize --tokenizer gpt2 "$T/zst/shard-00000.jsonl.zst" > "$T/tok-zst.txt" 2>"$T/err" \
  || { bad "tokenize .jsonl.zst"; cat "$T/err"; }
"$Z" tokenize --tokenizer gpt2 --threads 2 "$T/gz/shard-00000.jsonl.gz" > "$T/tok-gz.txt" 2>"$T/err" \
  || { bad "tokenize .jsonl.gz"; cat "$T/err"; }
check "tokenize: a .jsonl.gz gives the ids of the .jsonl.zst" \
  '[[ -s "$T/tok-zst.txt" ]] && cmp -s "$T/tok-zst.txt" "$T/tok-gz.txt"'
{ head -n 7 "$T/plain/shard-00000.jsonl" | gzip -c; tail -n +8 "$T/plain/shard-00000.jsonl" | gzip -c; } |
  "$Z" tokenize --tokenizer gpt2 - > "$T/tok-mm.txt" 2>"$T/err" || { bad "tokenize stdin"; cat "$T/err"; }
check "tokenize: two gzip members on standard input" 'cmp -s "$T/tok-zst.txt" "$T/tok-mm.txt"'
"$Z" tokenize --tokenizer gpt2 "$T/bad/trunc.jsonl.gz" >/dev/null 2>"$T/err"; rc=$?
check "tokenize: a truncated .jsonl.gz fails (rc $rc) naming the file" \
  '[[ $rc -eq 1 ]] && grep -q "trunc.jsonl.gz.*truncated gzip file" "$T/err"'
finish
