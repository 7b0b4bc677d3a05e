#!/usr/bin/env bash
# test_parquet_locality.sh ZEPHON - a shuffled epoch over Parquet shards
# reads each row group once (docs/formats.md "Parquet", docs/datasets.md
# "Segments"): the bytes fetch's loads read from storage
# (fetch_timing.bytes_compressed) are the files' size (their row groups), with row groups
# smaller than a segment and larger than one (then several segments share
# a row group, decoded once: the reader keeps the last one), by segments
# and whole; and every row is delivered once. Then Parquet as an input of
# `zephon preprocess` (token shards that give the batches of tokenizing the
# Parquet text on the fly) and as a part of a mixture. Fixtures by pyarrow
# (tools/pqref.sh).
set -u
Z=${1:?usage: test_parquet_locality.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
PQREF=$(bash "$(dirname "$0")/../../tools/pqref.sh" | tail -1) || { bad "tools/pqref.sh"; finish; exit; }
"$PQREF/venv/bin/python" - "$T" <<'PY' || bad "write fixtures"
import random, sys, pyarrow as pa, pyarrow.parquet as pq
random.seed(2)
words = ["alpha", "beta", "gamma", "delta", "épsilon", "ζeta"]
for k in range(4):
    rows = [{"id": k * 6000 + i,
             "text": " ".join(random.choice(words) for _ in range(random.randint(5, 400)))}
            for i in range(6000)]
    t = pa.Table.from_pylist(rows)
    pq.write_table(t, f"{sys.argv[1]}/small-rg-{k}.parquet", row_group_size=500, compression="none")
    pq.write_table(t, f"{sys.argv[1]}/big-rg-{k}.parquet", row_group_size=3000, compression="none")
PY
for kind in small-rg big-rg; do
  total=$(cat "$T"/$kind-*.parquet | wc -c)
  for seg in 1 whole; do
    rm -rf "$T/ids"
    "$Z" run "$T"/$kind-*.parquet --quiet --seed 4 --segment-mb $seg --block-shards 2 \
      --metrics-out "$T/m.json" --emit-ids "$T/ids" >/dev/null 2>"$T/err" || { bad "$kind $seg: run"; cat "$T/err"; }
    read_b=$(python3 -c "import json; print(json.load(open('$T/m.json'))['fetch_timing']['bytes_compressed'])")
    # by segments the footer is read at open, not counted: 98-100% of the files
    check "$kind, segments $seg: bytes read $read_b, the files' $total (each row group read once)" \
      '[[ $read_b -le $total && $((read_b * 100)) -ge $((total * 98)) ]]'
    n=$(sort -u "$T/ids/rank-0.ids" | wc -l)
    check "$kind, segments $seg: every row once ($n of 24000)" '[[ $n -eq 24000 && $(wc -l < "$T/ids/rank-0.ids") -eq 24000 ]]'
  done
done

# zephon preprocess: Parquet in, token shards out (token shards are one
# segment each: the Parquet run reads whole shards for the same order)
"$Z" preprocess --out "$T/pp" --format megatron "$T"/small-rg-{0,1}.parquet >/dev/null 2>"$T/err" ||
  { bad "preprocess"; cat "$T/err"; }
TOK=(--quiet --seed 6 --tokenize gpt2 --seq-len 255 --microbatch 4)
"$Z" run "$T/pp/manifest.json" "${TOK[@]}" --emit-digest "$T/d.pp" >/dev/null 2>"$T/err" || { bad "run tokens"; cat "$T/err"; }
"$Z" run "$T"/small-rg-{0,1}.parquet "${TOK[@]}" --segment-mb whole --emit-digest "$T/d.pq" >/dev/null 2>"$T/err" || { bad "run parquet"; cat "$T/err"; }
check "preprocess of Parquet: the token shards give the batches of the Parquet text ($(wc -l < "$T/d.pq") batches)" \
  '[[ -s $T/d.pq ]] && cmp -s "$T/d.pp" "$T/d.pq"'

# a mixture of a Parquet part and a JSONL part
python3 -c "
import json,sys
for i in range(3000): print(json.dumps({'text': 'jsonl record %d' % i}))" > "$T/j.jsonl"
"$Z" run --data "$T/small-rg-2.parquet@3" --data "$T/j.jsonl@1" --epoch-samples 4000 --quiet --seed 1 \
  --emit-samples "$T/smp" >"$T/out" 2>"$T/err"; rc=$?
check "a mixture of a Parquet and a JSONL part runs (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/err"
p0=$(awk '$3 == 0' "$T/smp/rank-0.samples" | wc -l); p1=$(awk '$3 == 1' "$T/smp/rank-0.samples" | wc -l)
check "the mixture draws 3:1 ($p0 Parquet, $p1 JSONL of 4000)" '[[ $p0 -eq 3000 && $p1 -eq 1000 ]]'
finish
