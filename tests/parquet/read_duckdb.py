"""Read Parquet files with DuckDB, one JSON object per row, columns in schema order.

    python read_duckdb.py FILE OUT.jsonl [FILE OUT.jsonl ...]

An independent reader for tests/cli/test_parquet.sh (the Python of
tools/pqref.sh). Row order is the file's (DuckDB keeps insertion order).
"""
import json
import sys

import duckdb


def main():
    args = sys.argv[1:]
    con = duckdb.connect()
    for path, out in zip(args[0::2], args[1::2]):
        cur = con.execute("SELECT * FROM read_parquet(?)", [path])
        names = [d[0] for d in cur.description]
        with open(out, "w", encoding="utf-8") as f:
            for row in cur.fetchall():
                f.write(json.dumps(dict(zip(names, row)), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
