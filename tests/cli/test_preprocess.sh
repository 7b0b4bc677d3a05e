#!/usr/bin/env bash
# test_preprocess.sh ZEPHON - `zephon preprocess` end to end:
#  1. h5 and megatron outputs (with and without --append-eot): one output
#     shard per input shard, the manifest's counts, the same files at 1 and
#     3 threads, and `zephon run` from them gives the batches of
#     tokenize-on-the-fly (concat and pad packing, shuffled and not);
#  2. an existing output is refused without --force, replaced with it;
#  3. SIGINT / SIGTERM while running: exit 130 / 143, no manifest, no
#     finished-looking file, no .part file left, the unfinished marker;
#     an interrupted folder (SIGINT, SIGKILL) is refused by runs (folder,
#     glob, one file) until preprocess --force redoes it;
#  4. bad records: the message names shard, line and cause;
#     --on-bad-record skip keeps the record count (empty documents);
#     empty texts give empty documents;
#  5. bad flags and inputs (exit 2 / 1 with a message).
#  (3c. shards read in several parts, every input compression: the batches
#  of tokenize-on-the-fly.)
#  (1b. --eot/--bos: the stored boundary ids and a run with the same ones.)
set -u
Z=${1:?usage: test_preprocess.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"

"$Z" gen --out "$T/ds" --shards 5 --samples-per-shard 120 --uneven --seed 11 >/dev/null ||
  { echo "FAIL - gen"; exit 1; }
M="$T/ds/manifest.json"

# the formats this build writes (the HDF5 and Megatron writers are optional)
formats=""
for f in h5 megatron; do
  if "$Z" preprocess --quiet --out "$T/probe-$f" --format $f "$M" 2>"$T/probe.err"; then
    formats="$formats $f"
  elif grep -q "no .* writer" "$T/probe.err"; then
    ok "format $f: not in this build (skipped)"
  else
    bad "format $f: $(cat "$T/probe.err")"
  fi
done
[[ -n $formats ]] || bad "no output format available"

samples() { # manifest -> the "samples" counts, one line
  python3 -c 'import json,sys; print(" ".join(str(s["samples"]) for s in json.load(open(sys.argv[1]))["shards"]))' "$1"
}

# 1. outputs and batch equality
want_counts=$(samples "$M")
for f in $formats; do
  [[ $f == h5 ]] && ext=h5 || ext=bin
  for eot in "" "--append-eot"; do
    tag="$f${eot:+ $eot}"
    o1="$T/o-$f$eot-1"; o3="$T/o-$f$eot-3"
    "$Z" preprocess --quiet --out "$o1" --format $f $eot --threads 1 "$M" >"$T/out" 2>&1 || bad "$tag: preprocess (1 thread): $(cat "$T/out")"
    "$Z" preprocess --quiet --out "$o3" --format $f $eot --threads 3 --data "$M" >"$T/out" 2>&1 || bad "$tag: preprocess (3 threads): $(cat "$T/out")"
    check "$tag: one output per input shard, same base names" \
      '[[ $(cd "$o1" && ls *.$ext | sed "s/\.$ext\$//" | tr "\n" " ") == "$(cd "$T/ds" && ls *.jsonl.zst | sed "s/\.jsonl\.zst\$//" | tr "\n" " ")" ]]'
    check "$tag: manifest counts equal the input's ($want_counts)" '[[ "$(samples "$o1/manifest.json")" == "$want_counts" ]]'
    same=1
    for g in "$o1"/*; do cmp -s "$g" "$o3/$(basename "$g")" || same=0; done
    check "$tag: the same files at 1 and 3 threads" '[[ $same == 1 ]]'
    check "$tag: no temporary file left" '! ls -A "$o1" | grep -qE "\.part|\.zptmp\."'
    for run in "--seed 3" "--seed 4 --pack pad" "--no-shuffle --seq-len 63"; do
      "$Z" run "$M" --quiet --tokenize gpt2 --seq-len 255 --microbatch 4 $run --emit-digest "$T/a.txt" >/dev/null 2>"$T/err" || bad "run text $run: $(cat "$T/err")"
      "$Z" run --data "$o1/manifest.json" --quiet --tokenize gpt2 --seq-len 255 --microbatch 4 $run --emit-digest "$T/b.txt" >/dev/null 2>"$T/err" || bad "$tag: run $run: $(cat "$T/err")"
      check "$tag: run $run: the batches of tokenize-on-the-fly ($(wc -l < "$T/a.txt") batches)" \
        '[[ -s "$T/a.txt" ]] && cmp -s "$T/a.txt" "$T/b.txt"'
      check "$tag: run $run: no warning (the manifest's sizes are the shards')" '[[ ! -s "$T/err" ]]' || cat "$T/err"
    done
  done
done
f=${formats%% *}; f=${formats# }; f=${f%% *}
[[ $f == h5 ]] && ext=h5 || ext=bin

# 2. refusal of existing outputs
O="$T/o-$f-1"
"$Z" preprocess --quiet --out "$O" --format $f "$M" >"$T/out" 2>&1; rc=$?
check "existing manifest refused: exit 1 ($rc)" '[[ $rc -eq 1 ]] && grep -q "manifest.json.* exists" "$T/out" && grep -q -- "--force" "$T/out"'
rm "$O/manifest.json"
"$Z" preprocess --quiet --out "$O" --format $f "$M" >"$T/out" 2>&1; rc=$?
check "existing shard output refused: exit 1 ($rc)" '[[ $rc -eq 1 ]] && grep -q "shard-00000.$ext.* exists" "$T/out" && [[ ! -e "$O/manifest.json" ]]'
"$Z" preprocess --quiet --out "$O" --format $f --force "$M" >"$T/out" 2>&1; rc=$?
check "--force replaces them: exit 0 ($rc)" '[[ $rc -eq 0 && -s "$O/manifest.json" ]]'
mkdir -p "$T/twins/a" "$T/twins/b"
cp "$T/ds/shard-00000.jsonl.zst" "$T/twins/a/x.jsonl.zst"; cp "$T/ds/shard-00001.jsonl.zst" "$T/twins/b/x.jsonl.zst"
"$Z" preprocess --quiet --out "$T/otw" --format $f "$T/twins/a/x.jsonl.zst" "$T/twins/b/x.jsonl.zst" >"$T/out" 2>&1; rc=$?
check "two shards of one base name: exit 1, both named, nothing written" \
  '[[ $rc -eq 1 ]] && grep -q "a/x.jsonl.zst" "$T/out" && grep -q "b/x.jsonl.zst" "$T/out" && [[ ! -e "$T/otw" ]]'

# 3. interrupted runs: one big shard, one thread
"$Z" gen --out "$T/big" --shards 1 --bytes 60M --seed 2 >/dev/null || bad "gen big"
for sig in INT TERM; do
  [[ $sig == INT ]] && want=130 || want=143
  OB="$T/ob-$sig"
  "$Z" preprocess --out "$OB" --format $f --threads 1 --progress "$T/big" >"$T/sout" 2>"$T/serr" &
  pid=$!
  # wait until it is writing (a temporary file) and has shown its progress
  # line (a busy machine may take longer than any fixed sleep), then signal it
  for _ in $(seq 100); do ls "$OB" 2>/dev/null | grep -q zptmp && break; sleep 0.05; done
  for _ in $(seq 150); do grep -q "MB/s" "$T/serr" 2>/dev/null && break; sleep 0.1; done
  kill -s $sig $pid
  for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  kill -0 $pid 2>/dev/null && { kill -9 $pid; bad "SIG$sig: still running after 10 s"; }
  wait $pid; rc=$?
  check "SIG$sig: exit $want ($rc)" '[[ $rc -eq $want ]]'
  check "SIG$sig: says interrupted, no manifest" 'grep -q "interrupted (SIG$sig)" "$T/serr" && [[ ! -e "$OB/manifest.json" ]]'
  check "SIG$sig: nothing left but the unfinished marker (temporaries removed): $(ls -A "$OB" 2>/dev/null | tr "\n" " ")" \
    '[[ $(ls -A "$OB" 2>/dev/null) == zephon-preprocess.unfinished ]]'
  check "SIG$sig: the progress line was shown" 'grep -q "documents, .* MB in, .* MB/s" "$T/serr"'
done

# 3b. an interrupted folder is refused by runs until redone (SIGINT of an
# HDF5 preprocess, SIGKILL of a Megatron one, after 2 of 8 outputs)
"$Z" gen --out "$T/eight" --shards 8 --bytes 200M --seed 5 >/dev/null || bad "gen eight"
for f in $formats; do
  [[ $f == h5 ]] && { sig=INT; ext=h5; } || { sig=KILL; ext=idx; }
  OI="$T/oi-$f"
  "$Z" preprocess --quiet --out "$OI" --format $f --threads 1 "$T/eight" >"$T/sout" 2>"$T/serr" &
  pid=$!
  for _ in $(seq 600); do (( $(ls "$OI"/*.$ext 2>/dev/null | wc -l) >= 2 )) && break; sleep 0.05; done
  kill -s $sig $pid; wait $pid
  n=$(ls "$OI"/*.$ext 2>/dev/null | wc -l)
  check "$f, SIG$sig after 2 outputs: $n of 8 outputs, no manifest, the marker" \
    '(( n >= 2 && n < 8 )) && [[ ! -e "$OI/manifest.json" && -s "$OI/zephon-preprocess.unfinished" ]]'
  [[ $f == h5 ]] && one="$OI/shard-00000.h5" || one="$OI/shard-00000.bin"
  for spec in "$OI" "$OI/" "$OI/*.${one##*.}" "$one"; do
    "$Z" run "$spec" --quiet --tokenize gpt2 --seq-len 255 --microbatch 4 >"$T/out" 2>&1; rc=$?
    check "$f: run '${spec#$T/}' of the interrupted folder refused: exit 1 ($rc), saying how to redo it" \
      '[[ $rc -eq 1 ]] && grep -q "did not finish" "$T/out" && grep -q "zephon-preprocess.unfinished" "$T/out" && grep -q -- "--force" "$T/out"' || cat "$T/out"
  done
  "$Z" preprocess --quiet --out "$OI" --format $f --threads 1 "$T/eight" >"$T/out" 2>&1; rc=$?
  check "$f: preprocess again without --force refused, naming the unfinished folder ($rc)" \
    '[[ $rc -eq 1 ]] && grep -q "did not finish" "$T/out" && grep -q -- "--force" "$T/out"'
  "$Z" preprocess --quiet --out "$OI" --format $f --force --threads 2 "$T/eight" >"$T/out" 2>&1; rc=$?
  check "$f: --force redoes it: exit 0 ($rc), manifest, no marker" \
    '[[ $rc -eq 0 && -s "$OI/manifest.json" && ! -e "$OI/zephon-preprocess.unfinished" ]]'
  "$Z" run "$OI" --quiet --tokenize gpt2 --seq-len 255 --microbatch 4 --max-batches 2 >"$T/out" 2>&1; rc=$?
  check "$f: the redone folder trains ($rc)" '[[ $rc -eq 0 ]]' || cat "$T/out"
done
rm -rf "$T/eight"

# 3c. shards of several parts (a shard is read forward about 4 MiB at a
# time, records cut across the parts' ends): plain, seekable, single-frame
# and gzip inputs of the same records give the batches of
# tokenize-on-the-fly, at 1 and 3 threads
"$Z" gen --out "$T/mp-plain" --format jsonl --shards 2 --bytes 20M --seed 5 >/dev/null || bad "gen multi-part"
"$Z" gen --out "$T/mp-seek" --shards 2 --bytes 20M --seed 5 >/dev/null || bad "gen multi-part seekable"
"$Z" gen --out "$T/mp-single" --single-frame --shards 2 --bytes 20M --seed 5 >/dev/null || bad "gen multi-part single"
mkdir -p "$T/mp-gz"
for g in "$T"/mp-plain/*.jsonl; do gzip -c "$g" > "$T/mp-gz/$(basename "$g").gz"; done
mp_run="--quiet --tokenize gpt2 --seq-len 511 --microbatch 4 --seed 6"
# (the text read as whole shards: segments of a text shard are another,
# documented, shuffle order)
"$Z" run "$T/mp-plain" $mp_run --segment-mb whole --emit-digest "$T/mp-a.txt" >/dev/null 2>"$T/err" || bad "multi-part: run text: $(cat "$T/err")"
for src in plain seek single gz; do
  for th in 1 3; do
    rm -rf "$T/mp-o"
    "$Z" preprocess --quiet --out "$T/mp-o" --format $f --threads $th "$T/mp-$src" >"$T/out" 2>&1 || bad "multi-part $src: preprocess: $(cat "$T/out")"
    "$Z" run --data "$T/mp-o/manifest.json" $mp_run --emit-digest "$T/mp-b.txt" >/dev/null 2>"$T/err" || bad "multi-part $src: run: $(cat "$T/err")"
    check "shards of several parts ($src, $th threads): the batches of tokenize-on-the-fly" \
      '[[ -s "$T/mp-a.txt" ]] && cmp -s "$T/mp-a.txt" "$T/mp-b.txt"'
  done
done
rm -rf "$T"/mp-*

# 4. bad records
B="$T/bad"; mkdir -p "$B"
printf '%s\n' '{"text": "one"}' '{"text": "two"}' '{"text": "three"' '{"text": "four"}' > "$B/a.jsonl"
printf '%s\n' '{"text": "one"}' '{"other": "x"}' > "$B/b.jsonl"
printf '%s\n' '{"text": "one"}' '{"text": 7}' > "$B/c.jsonl"
printf '%s\n' '{"text": ""}' '{"text": "x y"}' '{"text": ""}' > "$B/e.jsonl"
"$Z" preprocess --quiet --out "$T/ob1" --format $f "$B/a.jsonl" >"$T/out" 2>&1; rc=$?
check "malformed JSON: exit 1, names shard, line 3 and the cause" \
  '[[ $rc -eq 1 ]] && grep -q "shard .*a.jsonl.* line 3 (record 2): invalid JSON" "$T/out" && [[ ! -e "$T/ob1/manifest.json" ]]'
"$Z" preprocess --quiet --out "$T/ob2" --format $f "$B/b.jsonl" >"$T/out" 2>&1; rc=$?
check "missing field: exit 1, line 2, no field 'text'" '[[ $rc -eq 1 ]] && grep -q "line 2 (record 1): no field .text." "$T/out"'
"$Z" preprocess --quiet --out "$T/ob3" --format $f "$B/c.jsonl" >"$T/out" 2>&1; rc=$?
check "non-string field: exit 1, line 2, not a string" '[[ $rc -eq 1 ]] && grep -q "line 2 (record 1): field .text. is not a string" "$T/out"'
"$Z" preprocess --out "$T/ob4" --format $f --on-bad-record skip "$B/a.jsonl" "$B/b.jsonl" >"$T/out" 2>"$T/err"; rc=$?
check "skip: exit 0, the record counts kept (4 2)" '[[ $rc -eq 0 ]] && [[ "$(samples "$T/ob4/manifest.json")" == "4 2" ]]'
check "skip: each skip warned and counted" 'grep -q "warning: .*a.jsonl.* line 3" "$T/err" && grep -q "warning: .*b.jsonl.* line 2" "$T/err" && grep -q "2 bad records written as empty documents" "$T/out"'
"$Z" preprocess --quiet --out "$T/ob5" --format $f "$B/e.jsonl" >"$T/out" 2>&1; rc=$?
check "empty texts: exit 0, 3 documents" '[[ $rc -eq 0 ]] && [[ "$(samples "$T/ob5/manifest.json")" == "3" ]]'
"$Z" run "$B/e.jsonl" --quiet --no-shuffle --tokenize gpt2 --seq-len 7 --microbatch 1 --emit-digest "$T/a.txt" >/dev/null 2>&1
"$Z" run "$T/ob5/manifest.json" --quiet --no-shuffle --tokenize gpt2 --seq-len 7 --microbatch 1 --emit-digest "$T/b.txt" >/dev/null 2>&1
check "empty texts: the batches of tokenize-on-the-fly" '[[ -s "$T/a.txt" ]] && cmp -s "$T/a.txt" "$T/b.txt"'
printf '%s\n' '{"body": "alpha beta"}' '{"body": "gamma"}' > "$B/f.jsonl"
"$Z" preprocess --out "$T/ob6" --format $f --field body "$B/f.jsonl" >"$T/out" 2>&1; rc=$?
check "--field body: exit 0, summary line" '[[ $rc -eq 0 ]] && grep -q "1 shards, 2 documents, .* tokens" "$T/out"'

# 1b. --eot/--bos with --append-eot: those ids are stored around each
# document (the first id of the first document is the BOS, every document
# ends with the EOT), and a run given the same overrides reads the batches
# of tokenize-on-the-fly with them
for f in $formats; do
  o="$T/o-$f-eotbos"
  "$Z" preprocess --quiet --out "$o" --format $f --append-eot --eot 50000 --bos 50001 "$M" >"$T/out" 2>&1 || bad "$f --eot/--bos: preprocess: $(cat "$T/out")"
  if [[ $f == megatron ]]; then
    check "megatron --eot/--bos: BOS first, EOT last, one of each per document" \
      'python3 - "$o/shard-00000.bin" "$(samples "$o/manifest.json" | cut -d" " -f1)" <<PY
import struct, sys
d = open(sys.argv[1], "rb").read(); ids = struct.unpack("<%dH" % (len(d) // 2), d)
n = int(sys.argv[2])
sys.exit(0 if ids[0] == 50001 and ids[-1] == 50000 and ids.count(50001) == n and ids.count(50000) == n else 1)
PY'
  fi
  "$Z" run "$M" --quiet --tokenize gpt2 --eot 50000 --bos 50001 --seq-len 255 --microbatch 4 --seed 3 --emit-digest "$T/a.txt" >/dev/null 2>"$T/err" || bad "run text --eot/--bos: $(cat "$T/err")"
  "$Z" run --data "$o/manifest.json" --quiet --tokenize gpt2 --eot 50000 --bos 50001 --seq-len 255 --microbatch 4 --seed 3 --emit-digest "$T/b.txt" >/dev/null 2>"$T/err" || bad "$f --eot/--bos: run: $(cat "$T/err")"
  check "$f --eot/--bos: the batches of tokenize-on-the-fly with the same overrides" '[[ -s "$T/a.txt" ]] && cmp -s "$T/a.txt" "$T/b.txt"'
  "$Z" run "$M" --quiet --tokenize gpt2 --seq-len 255 --microbatch 4 --seed 3 --emit-digest "$T/c.txt" >/dev/null 2>"$T/err"
  check "$f --eot/--bos: other batches than the defaults'" '! cmp -s "$T/a.txt" "$T/c.txt"'
done
"$Z" preprocess --quiet --out "$T/o-badeot" --append-eot --eot 60000 "$M" >"$T/out" 2>&1; rc=$?
check "--eot outside the vocabulary: exit 1, named ($rc)" '[[ $rc -eq 1 ]] && grep -q "60000" "$T/out"'

# 5. bad flags and inputs
usage_err() { # description, args...
  local d=$1; shift
  "$Z" preprocess "$@" >"$T/out" 2>&1; local rc=$?
  check "$d: exit 2 ($rc)" '[[ $rc -eq 2 ]] && [[ -s "$T/out" ]]'
}
usage_err "no --out" "$M"
usage_err "no input" --out "$T/x"
usage_err "--format bogus" --out "$T/x" --format bogus "$M"
usage_err "--threads 0" --out "$T/x" --threads 0 "$M"
usage_err "--threads abc" --out "$T/x" --threads abc "$M"
usage_err "--on-bad-record maybe" --out "$T/x" --on-bad-record maybe "$M"
usage_err "unknown option" --out "$T/x" --bogus "$M"
usage_err "--out without value" "$M" --out
usage_err "--append-eot=1" --out "$T/x" --append-eot=1 "$M"
usage_err "--eot without --append-eot" --out "$T/x" --eot 5 "$M"
usage_err "--eot abc" --out "$T/x" --append-eot --eot abc "$M"
usage_err "--bos -2" --out "$T/x" --append-eot --bos -2 "$M"
usage_err "--shared with --format megatron" --shared "$T/x.h5" --format megatron "$M"
"$Z" preprocess --out "$T/x" "$T/nonexistent.jsonl" >"$T/out" 2>&1; rc=$?
check "missing input: exit 1, named" '[[ $rc -eq 1 ]] && grep -q "nonexistent.jsonl" "$T/out"'
"$Z" preprocess --out "$T/x" --tokenizer /nonexistent "$M" >"$T/out" 2>&1; rc=$?
check "bad tokenizer: exit 1, named" '[[ $rc -eq 1 ]] && grep -q "/nonexistent" "$T/out"'
"$Z" preprocess --help >"$T/out" 2>&1; rc=$?
check "--help: exit 0" '[[ $rc -eq 0 ]] && grep -q "usage: zephon preprocess" "$T/out"'
finish
