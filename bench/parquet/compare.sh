#!/usr/bin/env bash
# bench/parquet/compare.sh [BUILD_DIR] - Parquet shards measured in one run
# (docs/formats.md, "Parquet: files of other writers, and the benchmark"):
#   (a) training input: the text column -> GPT-2 -> concat-packed batches
#       (seq_len 2048, microbatch 8), samples/s from Parquet (written by
#       pyarrow with its defaults: snappy, dictionary, one row group per
#       shard) against the same documents from .jsonl.zst, at 1 and 2
#       threads, shuffled (seed 0); best of PASSES interleaved passes, in
#       samples/s (wall clock, the run's summary) and in documents per
#       CPU-second of the process (steadier on a shared machine); the
#       ratios Parquet / .jsonl.zst are printed (the goal: at least 0.9). One
#       unshuffled run of each at 2 threads checks that both give the same
#       batches (--emit-digest).
#   (b) reading the text column: `zephon run` in record mode (no
#       tokenizer) records/s against DuckDB reading the same files
#       (SELECT text FROM read_parquet(...), fetched whole as Python
#       objects and as an Arrow table, timed in Python), DuckDB at 1 thread
#       and at its default; one run each. Zephon's figure is its own summary
#       line (from the pipeline's start to its last batch), DuckDB's the
#       query's wall clock.
# BUILD_DIR defaults to build/release (configured Release when missing).
# Environment: MB=128 (text from bench/tokenizer/gen_text.mjs; needs node),
# SHARDS=8, PASSES=3. The independent readers come from tools/pqref.sh (a
# virtual environment with pyarrow and duckdb). Data under
# BUILD_DIR/bench-parquet (kept between runs).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
MB=${MB:-128} SHARDS=${SHARDS:-8} PASSES=${PASSES:-3}
command -v node >/dev/null || { echo "compare.sh: node is required (to generate the text)" >&2; exit 1; }
command -v zstd >/dev/null || { echo "compare.sh: zstd is required" >&2; exit 1; }
if [[ ! -f $B/CMakeCache.txt ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$B" -j2 --target zephon_cli >/dev/null
Z=$B/zephon
PQ=$(tools/pqref.sh | tail -n 1)
PY=$PQ/venv/bin/python
D=$B/bench-parquet
mkdir -p "$D"
export XDG_CACHE_HOME=$D/cache   # the index store of record counts, not the user's

data=$D/data-${MB}MB-$SHARDS
if [[ ! -f $data/.done || bench/parquet/compare_data.py -nt $data/.done ]]; then
  rm -rf "$data"; mkdir -p "$data"
  node bench/tokenizer/gen_text.mjs "$D/text-${MB}MB.jsonl" "$MB" > "$data/text.txt"
  "$PY" bench/parquet/compare_data.py write "$D/text-${MB}MB.jsonl" "$data" "$SHARDS" > "$data/layout.txt"
  for f in "$data"/part-*.jsonl; do zstd -q -3 --rm "$f"; done
  touch "$data/.done"
fi
pq=("$data"/part-*.parquet)
zs=("$data"/part-*.jsonl.zst)
echo "== machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) (other work lowers every figure)"
echo "== $(cat "$data/text.txt")"
echo "== $(cat "$data/layout.txt"); .jsonl.zst (zstd -3): $(cat "${zs[@]}" | wc -c) bytes"

# samples/s from a run's summary line ("... samples in X s: Y samples/s, ...")
rate() { awk '/samples\/s/ { for (i = 1; i <= NF; i++) if ($i == "samples/s,") { print $(i - 1); exit } }'; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b + 0 > a + 0) ? b : a }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
tok=(--tokenize gpt2 --seq-len 2048 --microbatch 8 --quiet)
docs=$(awk '{ print $1 }' "$data/layout.txt") bytes=$(awk '{ print $3 }' "$data/layout.txt")
# timed ARGS...: "SAMPLES/S CPU" of one `zephon run ARGS`: its summary's
# samples/s, and documents per CPU-second (user + system time of the process)
timed() {
  local out t
  TIMEFORMAT='%U %S'
  t=$( { time "$Z" run "$@" > "$D/run.out" 2>/dev/null; } 2>&1 ) || { echo "0 0"; return; }
  echo "$(rate < "$D/run.out") $(echo "$t" | awk -v n="$docs" '{ c = $1 + $2; printf "%.0f", (c > 0 ? n / c : 0) }')"
}

echo
echo "== (a) text -> gpt2 -> packed batches (seq_len 2048, microbatch 8, shuffled), best of $PASSES"
declare -A A C
for _ in $(seq "$PASSES"); do
  for t in 1 2; do
    for k in pq zs; do
      if [[ $k == pq ]]; then in=("${pq[@]}"); else in=("${zs[@]}"); fi
      read -r r c < <(timed "${in[@]}" "${tok[@]}" --threads $t)
      A[$k$t]=$(best "${A[$k$t]:-}" "$r"); C[$k$t]=$(best "${C[$k$t]:-}" "$c")
    done
  done
done
printf '%-8s %12s %12s %8s   %12s %12s %8s\n' threads parquet jsonl.zst ratio parquet jsonl.zst ratio
printf '%-8s %34s   %34s\n' "" "samples/s (wall)" "samples per CPU-second"
for t in 1 2; do
  printf '%-8s %12s %12s %8s   %12s %12s %8s\n' $t "${A[pq$t]}" "${A[zs$t]}" "$(ratio "${A[pq$t]}" "${A[zs$t]}")" \
    "${C[pq$t]}" "${C[zs$t]}" "$(ratio "${C[pq$t]}" "${C[zs$t]}")"
done
rm -f "$D/pq.dig" "$D/zs.dig"
"$Z" run "${pq[@]}" "${tok[@]}" --threads 2 --no-shuffle --emit-digest "$D/pq.dig" >/dev/null 2>&1 || true
"$Z" run "${zs[@]}" "${tok[@]}" --threads 2 --no-shuffle --emit-digest "$D/zs.dig" >/dev/null 2>&1 || true
if [[ -s $D/pq.dig ]] && cmp -s "$D/pq.dig" "$D/zs.dig"; then same=identical; else same=DIFFERENT; fi
echo "unshuffled, 2 threads: the two inputs' batches are $same ($(cat "$D/pq.dig" 2>/dev/null | wc -l) batches)"

echo
echo "== (b) reading the text column, one run each"
printf '%-40s %12s %12s %10s %14s\n' reader threads records/s "MB/s text" "rec/CPU-second"
row() { # WHO THREADS RECORDS SECONDS CPU_SECONDS
  awk -v w="$1" -v t="$2" -v n="$3" -v s="$4" -v c="$5" -v b="$bytes" -v d="$docs" 'BEGIN {
    r = s > 0 ? n / s : 0; printf "%-40s %12s %12.0f %10.1f %14.0f\n", w, t, r, (d > 0 ? b * r / d / 1e6 : 0), (c > 0 ? n / c : 0) }'
}
zrow() { # WHO THREADS FILES...: one record-mode run
  local who=$1 t=$2 r c; shift 2
  read -r r c < <(timed "$@" --threads $t --no-shuffle --quiet)
  # timed gives samples/s and records per CPU-second: back to seconds
  row "$who" $t "$docs" "$(awk -v n="$docs" -v r="$r" 'BEGIN { print (r > 0 ? n / r : 0) }')" \
    "$(awk -v n="$docs" -v c="$c" 'BEGIN { print (c > 0 ? n / c : 0) }')"
}
for t in 1 2; do zrow "zephon run, record mode, parquet" $t "${pq[@]}"; done
for t in 1 2; do zrow "zephon run, record mode, jsonl.zst" $t "${zs[@]}"; done
for t in 1 0; do   # 0: DuckDB's default thread count
  while read -r how n s b th c; do
    label=$th; [[ $t == 0 ]] && label="$th (default)"
    row "duckdb SELECT text, $how" "$label" "$n" "$s" "$c"
  done < <("$PY" bench/parquet/compare_data.py duckdb $t "${pq[@]}")
done
