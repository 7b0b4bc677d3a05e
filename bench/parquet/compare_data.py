"""Helpers of bench/parquet/compare.sh (run with tools/pqref.sh's Python).

    python compare_data.py write TEXT.jsonl OUTDIR SHARDS
        the documents of TEXT.jsonl ({"text": ...} per line) split in SHARDS
        consecutive parts, each written as OUTDIR/part-K.parquet by pyarrow
        with its defaults (snappy, dictionary, data page v1, one row group up
        to 1 Mi rows) and as OUTDIR/part-K.jsonl (to be zstd-compressed by
        the caller); prints one line: documents, bytes of text, shards,
        row groups and bytes of Parquet
    python compare_data.py duckdb THREADS FILE...
        DuckDB reading the text column of FILE...: one timed run of
        SELECT text FROM read_parquet([...]) fetched whole as Python
        objects (fetchall) and as an Arrow table (to_arrow_table), with
        SET threads=THREADS (0: DuckDB's default); prints
        "fetchall RECORDS SECONDS BYTES THREADS CPU" and the same for "arrow"
        (BYTES: of text; THREADS: the setting DuckDB ran with; CPU: user +
        system seconds of the process during the query)
"""
import json
import os
import resource
import sys
import time


def write(text, out, shards):
    import pyarrow as pa
    import pyarrow.parquet as pq
    with open(text, encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f if line.strip()]
    os.makedirs(out, exist_ok=True)
    per = (len(docs) + shards - 1) // shards
    groups = 0
    for k in range(shards):
        part = docs[k * per:(k + 1) * per]
        path = os.path.join(out, "part-%d" % k)
        pq.write_table(pa.table({"text": pa.array(part, pa.string())}), path + ".parquet")
        groups += pq.ParquetFile(path + ".parquet").metadata.num_row_groups
        with open(path + ".jsonl", "w", encoding="utf-8") as f:
            for d in part:
                f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    size = sum(os.path.getsize(os.path.join(out, "part-%d.parquet" % k)) for k in range(shards))
    text_bytes = sum(len(d.encode("utf-8")) for d in docs)
    print("%d documents, %d bytes of text, in %d shards; Parquet (pyarrow %s defaults): %d row groups, %d bytes"
          % (len(docs), text_bytes, shards, pa.__version__, groups, size))


def cpu():
    """User + system seconds of this process, all its threads (DuckDB's too)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def duck(threads, files):
    import duckdb
    con = duckdb.connect()
    if threads > 0:
        con.execute("SET threads=%d" % threads)
    threads = con.sql("SELECT current_setting('threads')").fetchall()[0][0]
    q = "SELECT text FROM read_parquet(%s)" % json.dumps(files)
    t, c = time.perf_counter(), cpu()
    rows = con.sql(q).fetchall()
    s, cs = time.perf_counter() - t, cpu() - c
    n = len(rows)
    nbytes = sum(len(r[0].encode("utf-8")) for r in rows)
    del rows
    print("fetchall %d %.6f %d %d %.6f" % (n, s, nbytes, threads, cs))
    t, c = time.perf_counter(), cpu()
    tab = con.sql(q).to_arrow_table()
    s, cs = time.perf_counter() - t, cpu() - c
    print("arrow %d %.6f %d %d %.6f" % (tab.num_rows, s, nbytes, threads, cs))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        duck(int(sys.argv[2]), sys.argv[3:])
