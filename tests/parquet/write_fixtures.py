"""Write the Parquet test corpus with independent writers (tests/cli/test_parquet.sh).

    python write_fixtures.py OUTDIR [N]

Run with the Python of tools/pqref.sh (pyarrow, datasets, duckdb). Writes into
OUTDIR the rows of rows.py (N rows, default 2500) as:
  rows.jsonl         the logical rows, one JSON object per line, schema order
  text.jsonl         {"id", "text"} of the rows whose text is not null
  rows_js.jsonl      the rows with the int64 list values as decimal strings
                     (for write_hyparquet.mjs: JavaScript numbers are doubles)
  pa_*.parquet       pyarrow: its defaults, each codec forced, data page v1
                     and v2, dictionary on and off, a dictionary that falls
                     back to PLAIN within a chunk, each column encoding
                     forced, small row groups, small pages
  hf_*.parquet       datasets (the Hugging Face hub's library): its defaults
                     (content-defined page chunking, page index); data
                     page v2 in row groups of 500 rows
  duck_*.parquet     DuckDB's COPY ... TO (FORMAT parquet): each codec,
                     PARQUET_VERSION V1 and V2, row groups of 2048 rows (its
                     smallest: DuckDB cuts row groups at multiples of 2048)
and prints one line per file: NAME<TAB>what was forced.
The hyparquet-writer files come from write_hyparquet.mjs (it reads rows_js.jsonl).
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rows import COLUMNS, make_rows  # noqa: E402

SCHEMA = pa.schema([
    ("id", pa.int64()), ("text", pa.string()), ("score", pa.float64()), ("flag", pa.bool_()),
    ("input_ids", pa.list_(pa.int32())), ("ids64", pa.list_(pa.int64())),
    ("ids16", pa.list_(pa.uint16())),
])


def table(rows):
    return pa.table({c: [r[c] for r in rows] for c in COLUMNS}, schema=SCHEMA)


def pyarrow_files(t, out):
    ints = ["id", "input_ids.list.element", "ids64.list.element", "ids16.list.element"]
    variants = {
        "pa_default": {},
        "pa_snappy": {"compression": "snappy"},
        "pa_gzip": {"compression": "gzip"},
        "pa_zstd": {"compression": "zstd"},
        "pa_none": {"compression": "none"},
        "pa_page_v1": {"data_page_version": "1.0"},
        "pa_page_v2": {"data_page_version": "2.0"},
        "pa_dict": {"use_dictionary": True, "compression": "none"},
        "pa_nodict": {"use_dictionary": False},
        "pa_format_1_0": {"version": "1.0"},
        "pa_plain_v2": {"use_dictionary": False, "data_page_version": "2.0",
                        "column_encoding": {c: "PLAIN" for c in COLUMNS if c != "flag"}},
        "pa_delta_binary_packed": {"use_dictionary": False,
                                   "column_encoding": {c: "DELTA_BINARY_PACKED" for c in ints}},
        "pa_delta_binary_packed_v2": {"use_dictionary": False, "data_page_version": "2.0",
                                      "compression": "zstd",
                                      "column_encoding": {c: "DELTA_BINARY_PACKED" for c in ints}},
        "pa_delta_length_byte_array": {"use_dictionary": False,
                                       "column_encoding": {"text": "DELTA_LENGTH_BYTE_ARRAY"}},
        "pa_delta_byte_array": {"use_dictionary": False,
                                "column_encoding": {"text": "DELTA_BYTE_ARRAY"}},
        "pa_delta_byte_array_v2": {"use_dictionary": False, "data_page_version": "2.0",
                                   "compression": "gzip",
                                   "column_encoding": {"text": "DELTA_BYTE_ARRAY"}},
        "pa_row_groups": {"row_group_size": 64},
        # a dictionary that outgrows its limit: the chunk's first pages use
        # it, the rest fall back to PLAIN (what a large text column gets)
        "pa_dict_fallback": {"dictionary_pagesize_limit": 4096, "data_page_size": 4096,
                             "write_batch_size": 64},
        "pa_pages": {"data_page_size": 512, "write_batch_size": 16},
        "pa_pages_v2": {"data_page_size": 512, "write_batch_size": 16, "data_page_version": "2.0",
                        "row_group_size": 300},
    }
    for name, kw in variants.items():
        pq.write_table(t, os.path.join(out, name + ".parquet"), **kw)
        print("%s.parquet\tpyarrow %s" % (name, json.dumps(kw, sort_keys=True) if kw else "defaults"))


def datasets_file(t, out):
    import datasets
    ds = datasets.Dataset(t)  # the features come from the Arrow schema
    ds.to_parquet(os.path.join(out, "hf_default.parquet"))
    print("hf_default.parquet\tdatasets %s Dataset.to_parquet defaults" % datasets.__version__)
    # its writer options go to pyarrow's ParquetWriter (it sets the codec and
    # the dictionary per column itself); its batches are the row groups
    ds.to_parquet(os.path.join(out, "hf_v2.parquet"), batch_size=500, data_page_version="2.0")
    print("hf_v2.parquet\tdatasets %s Dataset.to_parquet(batch_size=500, data_page_version=2.0)"
          % datasets.__version__)


def duckdb_files(t, out):
    import duckdb
    con = duckdb.connect()
    con.execute("SET threads=1")  # keeps the row order of the table in the file
    con.register("t", t)
    variants = {
        "duck_default": "",
        "duck_snappy": ", COMPRESSION snappy",
        "duck_zstd": ", COMPRESSION zstd",
        "duck_gzip": ", COMPRESSION gzip",
        "duck_none": ", COMPRESSION uncompressed",
        "duck_v1": ", PARQUET_VERSION V1",
        "duck_v2": ", PARQUET_VERSION V2",
        "duck_row_groups": ", ROW_GROUP_SIZE 2048",
    }
    for name, opts in variants.items():
        path = os.path.join(out, name + ".parquet")
        con.execute("COPY (SELECT * FROM t) TO '%s' (FORMAT parquet%s)" % (path, opts))
        print("%s.parquet\tduckdb %s COPY (FORMAT parquet%s)" % (name, duckdb.__version__, opts))


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2500
    os.makedirs(out, exist_ok=True)
    rows = make_rows(n)
    with open(os.path.join(out, "rows.jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "text.jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            if r["text"] is not None:
                f.write(json.dumps({"id": r["id"], "text": r["text"]}, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "rows_js.jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            js = dict(r, ids64=[str(v) for v in r["ids64"]])
            f.write(json.dumps(js, ensure_ascii=False) + "\n")
    t = table(rows)
    pyarrow_files(t, out)
    datasets_file(t, out)
    duckdb_files(t, out)


if __name__ == "__main__":
    main()
