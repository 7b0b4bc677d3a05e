#!/usr/bin/env python3
"""Files for bench/parquet (pyarrow, snappy, the hub's defaults otherwise):
text_plain.parquet (a text column, no dictionary), text_dict.parquet
(dictionary on: pyarrow falls back to PLAIN pages once the dictionary is
full, as on real corpora), ids.parquet (input_ids list<int32>, 1024 ids a
row). Text: words drawn from GPT-2's vocabulary (data/gpt2/vocab.bpe) with
a fixed seed. Usage: make_bench.py OUTDIR [MB]"""
import os, random, sys

import pyarrow as pa
import pyarrow.parquet as pq

out = sys.argv[1]
mb = float(sys.argv[2]) if len(sys.argv) > 2 else 64
os.makedirs(out, exist_ok=True)
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
words = []
with open(os.path.join(root, "data", "gpt2", "vocab.bpe"), encoding="utf-8") as f:
    next(f)
    for line in f:
        w = "".join(line.split()).replace("\u0120", "")
        if w.isalpha():
            words.append(w)
rng = random.Random(25)
texts, size = [], 0
while size < mb * 1e6:
    n = rng.randint(50, 800)
    t = " ".join(rng.choices(words, k=n)) + "."
    texts.append(t)
    size += len(t)
tbl = pa.table({"id": pa.array(range(len(texts)), pa.int64()), "text": pa.array(texts)})
pq.write_table(tbl, os.path.join(out, "text_plain.parquet"), compression="snappy", use_dictionary=False)
pq.write_table(tbl, os.path.join(out, "text_dict.parquet"), compression="snappy")
rows = int(mb * 1e6 / 4096) + 1
ids = pa.array([[rng.randrange(50257) for _ in range(1024)] for _ in range(rows)], pa.list_(pa.int32()))
pq.write_table(pa.table({"input_ids": ids}), os.path.join(out, "ids.parquet"), compression="snappy")
