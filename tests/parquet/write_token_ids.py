"""Write pre-tokenized Parquet files of the corpus' texts (tests/cli/test_parquet.sh).

    python write_token_ids.py TEXT.jsonl IDS.txt OUTDIR

TEXT.jsonl holds {"id": ..., "text": ...} per line; IDS.txt the GPT-2 ids of
each text, one JSON array per line in the same order (`zephon tokenize`).
Writes, each with the columns id, text and input_ids (the ids of text):
  ids_i32.parquet   pyarrow, input_ids list<int32> (the usual type of
                    tokenized Hugging Face datasets)
  ids_u16.parquet   pyarrow, list<uint16>, data page v2, small row groups
  ids_i64.parquet   DuckDB, BIGINT[] (list<int64>)
and text.jsonl.zst's input: OUTDIR/ids.jsonl, the same rows as JSON lines.
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def main():
    text_path, ids_path, out = sys.argv[1:4]
    with open(text_path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    with open(ids_path, encoding="utf-8") as f:
        ids = [json.loads(line) for line in f if line.strip()]
    if len(ids) != len(rows):
        sys.exit("write_token_ids.py: %d texts but %d id lists" % (len(rows), len(ids)))
    cols = {"id": [r["id"] for r in rows], "text": [r["text"] for r in rows], "input_ids": ids}

    def tab(elem):
        return pa.table({"id": pa.array(cols["id"], pa.int64()), "text": pa.array(cols["text"], pa.string()),
                         "input_ids": pa.array(ids, pa.list_(elem))})
    pq.write_table(tab(pa.int32()), os.path.join(out, "ids_i32.parquet"))
    pq.write_table(tab(pa.uint16()), os.path.join(out, "ids_u16.parquet"), data_page_version="2.0",
                   row_group_size=100)
    import duckdb
    con = duckdb.connect()
    con.execute("SET threads=1")
    t = tab(pa.int64())
    con.register("t", t)
    con.execute("COPY (SELECT * FROM t) TO '%s' (FORMAT parquet)" % os.path.join(out, "ids_i64.parquet"))
    with open(os.path.join(out, "ids.jsonl"), "w", encoding="utf-8") as f:
        for r, i in zip(rows, ids):
            f.write(json.dumps({"id": r["id"], "text": r["text"], "input_ids": i}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
