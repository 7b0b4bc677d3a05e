"""Check that the Parquet test corpus covers what the reader must read.

    python coverage.py FILE...

Reads each file's footer with DuckDB (parquet_metadata: an independent
reader of the metadata) and prints one line per file: row groups, codecs and
encodings. Exit 1 when the files together lack a codec (SNAPPY, GZIP, ZSTD,
UNCOMPRESSED), an encoding (PLAIN, RLE_DICTIONARY or PLAIN_DICTIONARY,
DELTA_BINARY_PACKED, DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY), or a file
of several row groups: a writer upgrade that silently stopped writing one of
them would otherwise leave it untested.
"""
import os
import sys

import duckdb

NEED_CODECS = {"SNAPPY", "GZIP", "ZSTD", "UNCOMPRESSED"}
NEED_ENCODINGS = {"PLAIN", "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"}


def main():
    con = duckdb.connect()
    codecs, encodings, multi = set(), set(), 0
    for path in sys.argv[1:]:
        rows = con.execute("SELECT row_group_id, compression, encodings FROM parquet_metadata(?)",
                           [path]).fetchall()
        groups = {r[0] for r in rows}
        c = {r[1] for r in rows}
        e = set()
        for r in rows:
            e |= {x.strip() for x in r[2].split(",")}
        codecs |= c
        encodings |= e
        multi += len(groups) > 1
        print("%s: %d row groups, %s; %s" % (os.path.basename(path), len(groups),
                                            " ".join(sorted(c)), " ".join(sorted(e))))
    missing = (NEED_CODECS - codecs) | (NEED_ENCODINGS - encodings)
    if not encodings & {"RLE_DICTIONARY", "PLAIN_DICTIONARY"}:
        missing.add("RLE_DICTIONARY or PLAIN_DICTIONARY")
    if not multi:
        missing.add("a file of several row groups")
    if missing:
        print("the corpus lacks: " + ", ".join(sorted(missing)))
        sys.exit(1)
    print("the corpus covers codecs %s and encodings %s" % (" ".join(sorted(codecs)), " ".join(sorted(encodings))))


if __name__ == "__main__":
    main()
