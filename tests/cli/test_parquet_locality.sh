#!/usr/bin/env bash
# test_parquet_locality.sh ZEPHON - a shuffled epoch over Parquet shards
# reads each row group once (docs/formats.md "Parquet", docs/datasets.md
# "Segments"): the bytes fetch's loads read from storage
# (fetch_timing.bytes_compressed) are the files' size (their row groups), with row groups
# smaller than a segment and larger than one (then several segments share
# a row group, decoded once: the reader keeps the last one), by segments
# and whole; and every row is delivered once. Fixtures by pyarrow
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
finish
