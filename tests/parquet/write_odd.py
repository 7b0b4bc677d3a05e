"""Parquet files with one column of a type beyond the corpus' (tests/cli/test_parquet.sh).

    python write_odd.py OUTDIR

Each file (pyarrow) holds 50 rows of id (int64), text (string) and one more
column, named after its type, that a reader of text and token ids may
refuse: struct, map, a list of lists, decimal, timestamp, half float,
fixed-size binary, a list of strings. Prints one line per file: NAME<TAB>the
extra column. What Zephon must do with each is in test_parquet.sh.
"""
import decimal
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

N = 50


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    base = {"id": pa.array(range(N), pa.int64()), "text": pa.array(["row %d" % i for i in range(N)])}
    odd = {
        "struct_col": pa.array([{"a": i, "b": str(i)} for i in range(N)],
                               pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "map_col": pa.array([[("k%d" % i, i)] for i in range(N)], pa.map_(pa.string(), pa.int32())),
        "nested_list_col": pa.array([[[i], [i, i + 1]] for i in range(N)], pa.list_(pa.list_(pa.int32()))),
        "decimal_col": pa.array([decimal.Decimal(i) / 100 for i in range(N)], pa.decimal128(10, 2)),
        "timestamp_col": pa.array(list(range(N)), pa.timestamp("ms")),
        "float16_col": pa.array([float(i) for i in range(N)], pa.float32()).cast(pa.float16()),
        "fixed_binary_col": pa.array([bytes([i]) * 4 for i in range(N)], pa.binary(4)),
        "string_list_col": pa.array([["a", str(i)] for i in range(N)], pa.list_(pa.string())),
    }
    for name, arr in odd.items():
        pq.write_table(pa.table(dict(base, **{name: arr})), os.path.join(out, name + ".parquet"))
        print("%s.parquet\t%s" % (name, arr.type))


if __name__ == "__main__":
    main()
