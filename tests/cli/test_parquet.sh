#!/usr/bin/env bash
# test_parquet.sh ZEPHON [MPIEXEC] - Parquet shards the project did not write
# (issue 25, point 5). The corpus (tests/parquet/rows.py: unicode, escapes,
# newlines, empty and null texts, int64, float64, bool, list<int32>,
# list<int64>, list<uint16> with empty and null lists) is written by
# pyarrow (defaults; each codec, page version, dictionary on/off and each
# encoding forced; small row groups; small pages), datasets, DuckDB and
# hyparquet-writer (tests/parquet/write_fixtures.py, write_hyparquet.mjs),
# with the versions of tools/pqref.sh. Checks:
#  1. the corpus covers every codec and encoding the reader supports, data
#     page v1 and v2, a dictionary falling back to PLAIN, several row groups
#     and many pages a chunk (coverage.py: the footers as DuckDB reads them,
#     the page headers read there)
#     and two independent readers (DuckDB, hyparquet) give back the logical
#     rows of every file: the fixtures are right;
#  2. Zephon's records (--emit-records, --no-shuffle) equal the logical
#     rows field by field, for every file (compare.py);
#  3. exactly once: shuffled, at world size 1 and 3 (--rank/--world-size,
#     and under mpirun -np 3 when MPIEXEC is given), every row is delivered
#     once with its fields intact (--emit-records) and the --emit-ids union
#     is every shard:record once;
#  4. resume: 40 batches with --save-state, then --resume: the two runs'
#     records (record mode) and batch digests (--tokenize gpt2) are the
#     uninterrupted run's;
#  5. --tokenize gpt2 on the text column gives the batches of the same rows
#     from .jsonl.zst (--emit-digest), null texts skipped and counted alike
#     (--skip-bad-records); a list<int32>/list<uint16>/list<int64> column of
#     the texts' ids (from `zephon tokenize`) with --field input_ids gives
#     the batches of tokenizing the text;
#  6. `zephon index` counts every file's rows from its footer;
#  7. truncated and bit-flipped files: exit 1, the message names the shard;
#  8. a column of a type the reader refuses (struct, map, list of lists,
#     FIXED_LEN_BYTE_ARRAY: decimal, half float, fixed-size binary): exit 1
#     naming the shard and the column; a list<string> and a timestamp
#     column are read (tests/parquet/write_odd.py).
set -u
Z=$(realpath "${1:?usage: test_parquet.sh PATH_TO_ZEPHON [MPIEXEC]}")
MPIRUN=${2:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/testlib.sh"
export XDG_CACHE_HOME="$T/cache"
P=$root/tests/parquet
first() { head -n 1 "$1" | cut -c 1-300; }   # a failed run's message, for the FAIL line
# check_or DESC COND CMD...: check, and when it fails run CMD (the details)
check_or() { local _d=$1 _c=$2; shift 2; if eval "$_c"; then ok "$_d"; else bad "$_d"; "$@"; fi; }

ref=$("$root/tools/pqref.sh" | tail -n 1) || { echo "FAIL - tools/pqref.sh (the independent writers and readers)"; exit 1; }
py=$ref/venv/bin/python
fx=$T/fx
"$py" "$P/write_fixtures.py" "$fx" > "$T/writers.txt" 2>"$T/err" &&
  node "$P/write_hyparquet.mjs" "$ref/npm" "$fx/rows_js.jsonl" "$fx" >> "$T/writers.txt" 2>>"$T/err" ||
  { cat "$T/err"; echo "FAIL - writing the fixtures"; exit 1; }
cd "$fx"
files=(*.parquet)
check "fixtures written by four writers (${#files[@]} files)" \
  '[[ ${#files[@]} -eq 32 ]] && grep -q "^pa_" "$T/writers.txt" && grep -q "^hf_" "$T/writers.txt" && grep -q "^duck_" "$T/writers.txt" && grep -q "^hy_" "$T/writers.txt"'
nrows=$(wc -l < rows.jsonl)

# 1. the corpus and the independent readers
"$py" "$P/coverage.py" "${files[@]}" > "$T/cover.txt"; rc=$?
check_or "the corpus covers every codec, encoding and several row groups" '[[ $rc -eq 0 ]]' cat "$T/cover.txt"
dargs=() hargs=() cargs=()
for f in "${files[@]}"; do
  b=${f%.parquet}
  dargs+=("$f" "$T/$b.duck.jsonl"); hargs+=("$f" "$T/$b.hy.jsonl")
  cargs+=("duckdb:$f" "$T/$b.duck.jsonl" "hyparquet:$f" "$T/$b.hy.jsonl")
done
"$py" "$P/read_duckdb.py" "${dargs[@]}" 2>"$T/err" || cat "$T/err"
node "$P/read_hyparquet.mjs" "$ref/npm" "${hargs[@]}" 2>"$T/err" || cat "$T/err"
"$py" "$P/compare.py" rows.jsonl "${cargs[@]}" > "$T/cmp.txt"; rc=$?
check_or "DuckDB and hyparquet read the logical rows back from every file" '[[ $rc -eq 0 ]]' grep -v "rows equal" "$T/cmp.txt"

# 2. Zephon's records, every file, field by field
zargs=()
for f in "${files[@]}"; do
  b=${f%.parquet}
  if "$Z" run "$f" --quiet --no-shuffle --emit-records "$T/z-$b" >/dev/null 2>"$T/z-$b.err"; then
    zargs+=("zephon:$f" "$T/z-$b/rank-0.jsonl")
  else
    bad "zephon run $f: $(first "$T/z-$b.err")"
  fi
done
"$py" "$P/compare.py" rows.jsonl "${zargs[@]}" > "$T/zcmp.txt"; rc=$?
check_or "Zephon's records equal the logical rows in all ${#zargs[@]} read files" '[[ $rc -eq 0 && ${#zargs[@]} -eq $((2 * ${#files[@]})) ]]' grep -v "rows equal" "$T/zcmp.txt"
for w in pa hf duck hy; do
  n=$(grep -c "^zephon:${w}_.*rows equal" "$T/zcmp.txt")
  check "  of them written by ${w}: $n files equal" '[[ $n -ge 1 ]]'
done

# 3. exactly once over ranks, shuffled
set3=(pa_row_groups.parquet duck_row_groups.parquet hy_gzip_pages.parquet)
total=$((3 * nrows))
for W in 1 3; do
  rm -rf "$T/ids" "$T/rec"
  for ((r = 0; r < W; r++)); do
    "$Z" run "${set3[@]}" --quiet --seed 7 --microbatch 16 --rank $r --world-size $W \
      --emit-ids "$T/ids" --emit-records "$T/rec" >/dev/null 2>"$T/err" || { bad "W=$W rank $r: $(first "$T/err")"; }
  done
  uniq=$(cat "$T"/ids/rank-*.ids | sort -u | wc -l); all=$(cat "$T"/ids/rank-*.ids | wc -l)
  check "W=$W: the --emit-ids union is every shard:record once ($uniq of $total, $all delivered)" \
    '[[ $uniq -eq $total && $all -eq $total ]]'
  check "W=$W: ids name the Parquet shards (shard:record)" 'grep -q "parquet:[0-9]*$" "$T/ids/rank-0.ids"'
  cat "$T"/rec/rank-*.jsonl > "$T/rec.jsonl"
  "$py" "$P/compare.py" --by-id=3 rows.jsonl "records W=$W" "$T/rec.jsonl" > "$T/out"; rc=$?
  check_or "W=$W: every row delivered 3 times (one per file), fields intact" '[[ $rc -eq 0 ]]' cat "$T/out"
  check "W=$W: shuffled (not the files' order)" \
    '[[ -s "$T/ids/rank-0.ids" ]] && ! cmp -s <(cut -d: -f2 "$T/ids/rank-0.ids" | head -50) <(seq 0 49)'
done
if [[ -n $MPIRUN ]]; then
  # as tests/mpi/mpilib.sh sets them (not sourced: it would start a second testlib.sh)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
  # under ASan: Open MPI's allocations kept until exit are suppressed by
  # library name, as tests/mpi/tests.cmake does (needs full stacks)
  mpi_env=(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
           LSAN_OPTIONS="suppressions=$root/tests/mpi/lsan.supp:print_suppressions=0")
  rm -rf "$T/mids" "$T/mrec"
  env "${mpi_env[@]}" timeout 120 "$MPIRUN" --oversubscribe --bind-to none -np 3 "$Z" run "${set3[@]}" --quiet --seed 7 --microbatch 16 --emit-ids "$T/mids" \
    --emit-records "$T/mrec" >/dev/null 2>"$T/err"; rc=$?
  check_or "mpirun -np 3: runs (rc $rc)" '[[ $rc -eq 0 ]]' head -5 "$T/err"
  uniq=$(cat "$T"/mids/rank-*.ids 2>/dev/null | sort -u | wc -l); all=$(cat "$T"/mids/rank-*.ids 2>/dev/null | wc -l)
  check "mpirun -np 3: every shard:record once ($uniq of $total)" '[[ $uniq -eq $total && $all -eq $total ]]'
  same_streams() { local r; for r in 0 1 2; do cmp -s "$T/mids/rank-$r.ids" "$T/ids/rank-$r.ids" || return 1; done; }
  check "mpirun -np 3: the same streams as --rank/--world-size" same_streams
  cat "$T"/mrec/rank-*.jsonl > "$T/mrec.jsonl" 2>/dev/null
  "$py" "$P/compare.py" --by-id=3 rows.jsonl "records mpirun -np 3" "$T/mrec.jsonl" > "$T/out"; rc=$?
  check_or "mpirun -np 3: every row 3 times, fields intact" '[[ $rc -eq 0 ]]' cat "$T/out"
fi

# 4. resume mid-epoch
for mode in rec tok; do
  d=$T/res-$mode; mkdir -p "$d"
  if [[ $mode == rec ]]; then
    args=("${set3[@]}" --quiet --seed 3 --microbatch 16); out=(--emit-records)
  else
    args=(pa_row_groups.parquet hy_gzip_pages.parquet --quiet --seed 3 --tokenize gpt2 --seq-len 63 --microbatch 4 --skip-bad-records)
    out=(--emit-ids)
  fi
  "$Z" run "${args[@]}" --threads 2 --emit-digest "$d/full.dig" "${out[@]}" "$d/full" >/dev/null 2>"$d/err" ||
    bad "$mode: the uninterrupted run: $(first "$d/err")"
  "$Z" run "${args[@]}" --threads 1 --max-batches 40 --save-state "$d/s.json" --emit-digest "$d/p1.dig" \
    "${out[@]}" "$d/p1" >/dev/null 2>"$d/err" || bad "$mode: the first 40 batches: $(first "$d/err")"
  "$Z" run "${args[@]}" --threads 2 --resume "$d/s.json" --emit-digest "$d/p2.dig" \
    "${out[@]}" "$d/p2" >/dev/null 2>"$d/err" || bad "$mode: --resume: $(first "$d/err")"
  n=$(wc -l < "$d/full.dig")
  check "$mode: 40 batches + resumed run = the uninterrupted run ($n batches, digests)" \
    '[[ $n -gt 60 ]] && cat "$d/p1.dig" "$d/p2.dig" | cmp -s - "$d/full.dig"'
  ext=jsonl; [[ $mode == tok ]] && ext=ids
  check "$mode: ... and its ${out[0]#--emit-}" \
    'cat "$d/p1/rank-0.$ext" "$d/p2/rank-0.$ext" | cmp -s - "$d/full/rank-0.$ext"'
done

# 5. tokenizing: Parquet text = the same rows from .jsonl.zst; token-id columns
zstd -q -f rows.jsonl -o rows.jsonl.zst
tok=(--quiet --no-shuffle --tokenize gpt2 --seq-len 127 --microbatch 4 --skip-bad-records)
"$Z" run rows.jsonl.zst "${tok[@]}" --emit-digest "$T/zst.dig" > "$T/zst.out" 2>"$T/err" || bad "jsonl.zst: $(first "$T/err")"
nulls=$(grep -c '"text": null' rows.jsonl)
check "jsonl.zst: the $nulls null texts skipped" 'grep -q "skipped $nulls," "$T/zst.out"'
for f in pa_default.parquet pa_delta_byte_array.parquet pa_page_v2.parquet hf_default.parquet hf_v2.parquet duck_v2.parquet hy_default.parquet hy_gzip_pages.parquet; do
  "$Z" run "$f" "${tok[@]}" --emit-digest "$T/$f.dig" > "$T/$f.out" 2>"$T/err" || bad "$f --tokenize: $(first "$T/err")"
  check "--tokenize gpt2: $f gives the batches of rows.jsonl.zst, $nulls null texts skipped" \
    '[[ -s "$T/zst.dig" ]] && cmp -s "$T/$f.dig" "$T/zst.dig" && grep -q "skipped $nulls," "$T/$f.out"'
done
"$Z" tokenize text.jsonl > "$T/ids.txt" 2>"$T/err" || bad "zephon tokenize: $(first "$T/err")"
"$py" "$P/write_token_ids.py" text.jsonl "$T/ids.txt" "$fx" 2>"$T/err" || bad "write_token_ids.py: $(first "$T/err")"
zstd -q -f ids.jsonl -o ids.jsonl.zst
tok=(--quiet --no-shuffle --tokenize gpt2 --seq-len 127 --microbatch 4)
"$Z" run ids.jsonl.zst "${tok[@]}" --emit-digest "$T/text.dig" >/dev/null 2>"$T/err" || bad "ids.jsonl.zst text: $(first "$T/err")"
for f in ids_i32 ids_u16 ids_i64; do
  "$Z" run $f.parquet "${tok[@]}" --field input_ids --emit-digest "$T/$f.dig" >/dev/null 2>"$T/err" ||
    bad "$f --field input_ids: $(first "$T/err")"
  check "--field input_ids: $f.parquet gives the batches of tokenizing its text" \
    '[[ -s "$T/text.dig" ]] && cmp -s "$T/$f.dig" "$T/text.dig"'
done
"$Z" run ids_i32.parquet "${tok[@]}" --emit-digest "$T/pqtext.dig" >/dev/null 2>&1
check "--field text of the same file: the same batches" 'cmp -s "$T/pqtext.dig" "$T/text.dig"'

# 6. zephon index: counts from the footers
"$Z" index -o "$T/m.json" "$fx/*.parquet" >/dev/null 2>"$T/err"; rc=$?
check_or "zephon index over ${#files[@]}+ Parquet files (rc $rc)" '[[ $rc -eq 0 ]]' head -3 "$T/err"
count_ok() { # every file of the corpus (not the ids_* files of 5.) counted $nrows rows
  python3 - "$T/m.json" "$nrows" "${#files[@]}" <<'PY'
import json, os, sys
m = json.load(open(sys.argv[1]))
c = [s["samples"] for s in m["shards"] if not os.path.basename(s["path"]).startswith("ids_")]
sys.exit(0 if len(c) == int(sys.argv[3]) and set(c) == {int(sys.argv[2])} else 1)
PY
}
check "every file of the corpus counted $nrows rows" count_ok
"$Z" run "$T/m.json" --quiet --no-shuffle --max-batches 2 >/dev/null 2>"$T/err"; rc=$?
check_or "the manifest runs" '[[ $rc -eq 0 ]]' head -3 "$T/err"

# 7. damaged files: exit 1, the message names the shard
size=$(stat -c %s pa_default.parquet)
head -c $((size / 2)) pa_default.parquet > cut_half.parquet
head -c $((size - 3)) pa_default.parquet > cut_magic.parquet
head -c 100 pa_default.parquet > cut_100.parquet
# the footer length (the 4 bytes before the closing "PAR1") made larger than the file
cp pa_default.parquet bad_footer_len.parquet
printf '\xff\xff\xff\x0f' | dd of=bad_footer_len.parquet bs=1 seek=$((size - 8)) conv=notrunc status=none
# a byte of the text column's first data page flipped: gzip pages carry a CRC
off=$("$py" -c "import pyarrow.parquet as pq; c=pq.ParquetFile('pa_gzip.parquet').metadata.row_group(0).column(1); print((c.dictionary_page_offset or c.data_page_offset) + c.total_compressed_size // 2)")
cp pa_gzip.parquet flip_gzip_page.parquet
"$py" -c "
import sys; f = open('flip_gzip_page.parquet', 'r+b'); f.seek($off); b = f.read(1); f.seek($off); f.write(bytes([b[0] ^ 0x10]))"
for f in cut_half cut_magic cut_100 bad_footer_len flip_gzip_page; do
  "$Z" run $f.parquet --quiet --no-shuffle >/dev/null 2>"$T/err"; rc=$?
  check "$f.parquet: exit 1 naming the shard ($(head -c 160 "$T/err" | tr '\n' ' '))" '[[ $rc -eq 1 ]] && grep -q "$f.parquet" "$T/err"'
done

# 8. column types beyond the corpus: refused naming the shard and the column, or read
"$py" "$P/write_odd.py" "$fx/odd" >/dev/null 2>"$T/err" || bad "write_odd.py: $(first "$T/err")"
for c in struct_col map_col nested_list_col decimal_col float16_col fixed_binary_col; do
  "$Z" run "odd/$c.parquet" --quiet --no-shuffle >/dev/null 2>"$T/err"; rc=$?
  check "$c (refused): exit 1 naming the shard and the column ($(first "$T/err"))" \
    '[[ $rc -eq 1 ]] && grep -q "$c.parquet" "$T/err" && grep -q "column .$c.*unsupported" "$T/err"'
done
for c in string_list_col timestamp_col; do
  "$Z" run "odd/$c.parquet" --quiet --no-shuffle --emit-records "$T/odd-$c" >/dev/null 2>"$T/err" ||
    bad "$c: $(first "$T/err")"
done
check "a list<string> column is read: [\"a\", \"<i>\"] in every row" \
  "python3 -c 'import json,sys; r=[json.loads(l) for l in open(\"$T/odd-string_list_col/rank-0.jsonl\")]; sys.exit(0 if len(r)==50 and all(x==dict(id=i, text=\"row %d\" % i, string_list_col=[\"a\", str(i)]) for i, x in enumerate(r)) else 1)'"
check "a timestamp column is read as its stored integer" \
  "python3 -c 'import json,sys; r=[json.loads(l) for l in open(\"$T/odd-timestamp_col/rank-0.jsonl\")]; sys.exit(0 if len(r)==50 and all(x==dict(id=i, text=\"row %d\" % i, timestamp_col=i) for i, x in enumerate(r)) else 1)'"

finish
