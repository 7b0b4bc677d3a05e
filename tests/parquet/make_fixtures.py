#!/usr/bin/env python3
"""Parquet fixtures for tests/test_parquet.c, written by pyarrow (the Hugging
Face hub's writer) with each codec, page version, dictionary setting and
forced encoding the reader covers, plus files it must refuse.

Usage: make_fixtures.py OUTDIR   (run with tools/pqref.sh's venv python)

For every readable file NAME.parquet it writes NAME.expected.jsonl: pyarrow's
own reading of the file, one JSON object per row (json.dumps of to_pylist,
separators (",", ":"), ensure_ascii=False), with the values mapped as
docs/formats.md says the reader maps them (NaN/Inf -> null, timestamps and
dates -> integers of their unit, decimals -> strings, float32 -> its
shortest float32 text). It writes MANIFEST: one line per readable file.
Deterministic (fixed seed)."""
import decimal, json, math, os, random, sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(25)
N = 2500

WORDS = ["alpha", "beta", "γάμμα", "дельта", "日本語", "emoji 🎉", "tab\there",
         "quote\"q", "back\\slash", "new\nline", "ctl\x01\x1f", "", "a" * 300]


def text(i):
    if i % 7 == 3:
        return None
    k = rng.randint(0, 6)
    return " ".join(rng.choice(WORDS) for _ in range(k)) + f" #{i}"


def ids(i, lo, hi, nulls=False):
    if i % 11 == 5:
        return None
    if i % 13 == 2:
        return []
    n = rng.randint(1, 40)
    return [None if nulls and rng.random() < 0.05 else rng.randint(lo, hi) for _ in range(n)]


def table():
    rows = range(N)
    f64 = [rng.uniform(-1e6, 1e6) for _ in rows]
    f64[1], f64[2], f64[3], f64[4] = float("nan"), float("inf"), 1e300, 3.0
    return pa.table({
        "id": pa.array(list(rows), pa.int64()),
        "text": pa.array([text(i) for i in rows], pa.string()),
        "input_ids": pa.array([ids(i, 0, 50000) for i in rows], pa.list_(pa.int32())),
        "ids64": pa.array([ids(i, -2**40, 2**40, nulls=True) for i in rows], pa.list_(pa.int64())),
        "ids16": pa.array([ids(i, 0, 65535) for i in rows], pa.list_(pa.uint16())),
        "words": pa.array([None if i % 17 == 1 else [rng.choice(WORDS) for _ in range(i % 4)]
                           for i in rows], pa.list_(pa.string())),
        "score": pa.array(f64, pa.float64()),
        "f32": pa.array([None if i % 5 == 0 else rng.uniform(-100, 100) for i in rows], pa.float32()),
        "flag": pa.array([None if i % 9 == 0 else bool(i % 2) for i in rows], pa.bool_()),
        "u32": pa.array([rng.randint(0, 2**32 - 1) for _ in rows], pa.uint32()),
        "i8": pa.array([rng.randint(-128, 127) for _ in rows], pa.int8()),
        "cat": pa.array([rng.choice(["red", "green", "blue"]) for _ in rows], pa.string()),
        "ts": pa.array([1700000000000 + i * 1000 for i in rows], pa.timestamp("ms")),
        "day": pa.array([19000 + i for i in rows], pa.date32()),
        "blob": pa.array([b"bin%d" % i for i in rows], pa.binary()),
    }, schema=pa.schema([pa.field("id", pa.int64(), nullable=False)] + [
        pa.field(n, t) for n, t in [
            ("text", pa.string()), ("input_ids", pa.list_(pa.int32())),
            ("ids64", pa.list_(pa.int64())), ("ids16", pa.list_(pa.uint16())),
            ("words", pa.list_(pa.string())), ("score", pa.float64()),
            ("f32", pa.float32()), ("flag", pa.bool_()), ("u32", pa.uint32()),
            ("i8", pa.int8()), ("cat", pa.string()), ("ts", pa.timestamp("ms")),
            ("day", pa.date32()), ("blob", pa.binary())]]))


def conv(v, t):
    if v is None:
        return None
    if pa.types.is_list(t):
        return [conv(x, t.value_type) for x in v]
    if pa.types.is_float32(t):
        return None if not math.isfinite(v) else float(str(np.float32(v)))
    if pa.types.is_floating(t):
        return None if not math.isfinite(v) else v
    if pa.types.is_decimal(t):
        return str(v)
    if pa.types.is_binary(t):
        return v.decode("utf-8")
    return v


def expected(path):
    t = pq.read_table(path)
    # timestamps and dates as integers of their unit
    cols = []
    for f, c in zip(t.schema, t.columns):
        if pa.types.is_timestamp(f.type) or pa.types.is_date32(f.type):
            c = c.cast(pa.int64() if pa.types.is_timestamp(f.type) else pa.int32())
        cols.append(c)
    t = pa.table(cols, names=t.schema.names)
    types = [f.type for f in t.schema]
    with open(path[:-len(".parquet")] + ".expected.jsonl", "w", encoding="utf-8") as o:
        for row in t.to_pylist():
            r = {n: conv(row[n], ty) for n, ty in zip(t.schema.names, types)}
            o.write(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n")


T = table()
readable = []


def write(name, tbl=T, **kw):
    kw.setdefault("row_group_size", 1000)
    kw.setdefault("data_page_size", 2048)
    kw.setdefault("write_batch_size", 64)
    path = os.path.join(out, name + ".parquet")
    pq.write_table(tbl, path, **kw)
    return path


for codec in ["none", "snappy", "gzip", "zstd"]:
    for ver in ["1.0", "2.0"]:
        for dic in [True, False]:
            name = f"{codec}_v{ver[0]}_{'dict' if dic else 'plain'}"
            expected(write(name, compression=codec, data_page_version=ver, use_dictionary=dic))
            readable.append(name)

# forced encodings (no dictionary for those columns)
enc = {"id": "DELTA_BINARY_PACKED", "i8": "DELTA_BINARY_PACKED", "u32": "DELTA_BINARY_PACKED",
       "ts": "DELTA_BINARY_PACKED", "input_ids.list.element": "DELTA_BINARY_PACKED",
       "ids64.list.element": "DELTA_BINARY_PACKED", "ids16.list.element": "DELTA_BINARY_PACKED", "text": "DELTA_LENGTH_BYTE_ARRAY",
       "words.list.element": "DELTA_BYTE_ARRAY", "cat": "DELTA_BYTE_ARRAY", "blob": "DELTA_LENGTH_BYTE_ARRAY",
       "score": "BYTE_STREAM_SPLIT", "f32": "BYTE_STREAM_SPLIT", "flag": "RLE"}
for ver in ["1.0", "2.0"]:
    for codec in ["snappy", "zstd"]:
        name = f"enc_v{ver[0]}_{codec}"
        expected(write(name, compression=codec, data_page_version=ver, use_dictionary=False,
                       column_encoding=enc))
        readable.append(name)

# a dictionary that fills up: dictionary pages, then PLAIN pages in the same chunk
expected(write("dict_fallback", compression="snappy", dictionary_pagesize_limit=600))
readable.append("dict_fallback")
# format version 1.0: PLAIN_DICTIONARY pages
expected(write("plaindict_v1", compression="snappy", version="1.0"))
readable.append("plaindict_v1")
# one row group, default page sizes; and one row per row group
expected(write("onegroup", row_group_size=10**6, data_page_size=None, write_batch_size=None,
               compression="snappy"))
readable.append("onegroup")
small = T.slice(0, 7)
expected(write("tiny_groups", small, row_group_size=1, compression="zstd"))
readable.append("tiny_groups")
# decimals stored as integers
dec = pa.table({"d32": pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-0.05"),
                                 decimal.Decimal("12345.67")], pa.decimal128(9, 2)),
                "d64": pa.array([decimal.Decimal("-123456789.123"), decimal.Decimal("0.000"),
                                 None, decimal.Decimal("7.001")], pa.decimal128(18, 3))})
expected(write("decimal", dec, store_decimal_as_integer=True))
readable.append("decimal")
# an empty file (no rows)
expected(write("empty", T.slice(0, 0)))
readable.append("empty")

# pyarrow's older list naming (list<item>, use_compliant_nested_type=False)
expected(write("list_item", T.select(["id", "input_ids", "words", "ids64"]),
               use_compliant_nested_type=False, compression="snappy"))
readable.append("list_item")

# DuckDB, a writer of other habits: its defaults (snappy), zstd, page v2
import duckdb
con = duckdb.connect()
con.execute("""CREATE TABLE t AS SELECT i AS id,
    CASE WHEN i % 7 = 3 THEN NULL ELSE 'row ' || i || ' ' || repeat('é', i % 5) || chr(10) END AS text,
    CASE WHEN i % 11 = 5 THEN NULL WHEN i % 13 = 2 THEN []::INTEGER[]
         ELSE list_transform(range(i % 30 + 1), lambda x: (x * 7919 + i) % 50257)::INTEGER[] END AS input_ids,
    CASE WHEN i % 4 = 0 THEN NULL ELSE i / 8.0 END AS score,
    (i % 3 = 0) AS flag,
    ['a' || (i % 5), NULL, 'b']::VARCHAR[] AS words
    FROM range(5000) r(i)""")
for name, opts in [("duckdb_default", "FORMAT parquet"),
                   ("duckdb_zstd_v2", "FORMAT parquet, COMPRESSION zstd, PARQUET_VERSION v2, ROW_GROUP_SIZE 2048"),
                   ("duckdb_gzip", "FORMAT parquet, COMPRESSION gzip, ROW_GROUP_SIZE 1000")]:
    con.execute(f"COPY t TO '{os.path.join(out, name + '.parquet')}' ({opts})")
    expected(os.path.join(out, name + ".parquet"))
    readable.append(name)

# The legacy list forms no writer here produces, written field by field
# from the Parquet specification (Thrift compact protocol): a 2-level LIST
# ("optional group ids (LIST) { repeated int32 array; }") and a bare
# repeated leaf at the top level ("repeated binary tags (UTF8)"). pyarrow
# reads the file back for the expected lines.
def tc_varint(v):
    b = bytearray()
    while True:
        if v < 0x80:
            b.append(v)
            return bytes(b)
        b.append((v & 0x7F) | 0x80)
        v >>= 7


def tc_zz(v):
    return tc_varint((v << 1) ^ (v >> 63))


class TStruct:
    """A compact-protocol struct: fields added in increasing id order."""
    def __init__(self):
        self.b, self.last = bytearray(), 0

    def field(self, fid, ctype):
        self.b.append(((fid - self.last) << 4) | ctype)
        self.last = fid

    def i32(self, fid, v):
        self.field(fid, 5); self.b += tc_zz(v); return self

    def i64(self, fid, v):
        self.field(fid, 6); self.b += tc_zz(v); return self

    def str(self, fid, v):
        v = v.encode(); self.field(fid, 8); self.b += tc_varint(len(v)) + v; return self

    def struct(self, fid, st):
        self.field(fid, 12); self.b += st.end(); return self

    def lst(self, fid, ctype, items):
        self.field(fid, 9)
        self.b.append((len(items) << 4) | ctype if len(items) < 15 else 0xF0 | ctype)
        if len(items) >= 15:
            self.b += tc_varint(len(items))
        for it in items:
            if ctype == 12:
                self.b += it.end()
            elif ctype == 8:
                self.b += tc_varint(len(it.encode())) + it.encode()
            else:
                self.b += tc_zz(it)
        return self

    def end(self):
        return bytes(self.b) + b"\x00"


def bitpacked(vals, bw):
    vals = list(vals) + [0] * (-len(vals) % 8)
    acc = sum(v << (i * bw) for i, v in enumerate(vals))
    return tc_varint((len(vals) // 8) << 1 | 1) + acc.to_bytes(len(vals) * bw // 8, "little")


def legacy_lists(path):
    # rows: ids [1,2,3] null [] [7] ; tags ["a","b"] [] ["c"] []
    cols = [
        ("ids", 1, [0, 1, 1, 0, 0, 0], [2, 2, 2, 0, 1, 2], 2,
         b"".join(v.to_bytes(4, "little") for v in [1, 2, 3, 7]), ["ids", "array"]),
        ("tags", 6, [0, 1, 0, 0, 0], [1, 1, 0, 1, 0], 1,
         b"".join(len(v).to_bytes(4, "little") + v for v in [b"a", b"b", b"c"]), ["tags"]),
    ]
    body, chunks = bytearray(b"PAR1"), []
    for name, ptype, rep, dfn, maxd, vals, path_in in cols:
        r = bitpacked(rep, 1)
        d = bitpacked(dfn, 2 if maxd > 1 else 1)
        page = len(r).to_bytes(4, "little") + r + len(d).to_bytes(4, "little") + d + vals
        hdr = (TStruct().i32(1, 0).i32(2, len(page)).i32(3, len(page))
               .struct(5, TStruct().i32(1, len(rep)).i32(2, 0).i32(3, 3).i32(4, 3))).end()
        off = len(body)
        body += hdr + page
        meta = (TStruct().i32(1, ptype).lst(2, 5, [0, 3]).lst(3, 8, path_in).i32(4, 0)
                .i64(5, len(rep)).i64(6, len(hdr) + len(page)).i64(7, len(hdr) + len(page))
                .i64(9, off))
        chunks.append(TStruct().i64(2, off).struct(3, meta))
    schema = [TStruct().str(4, "schema").i32(5, 2),
              TStruct().i32(3, 1).str(4, "ids").i32(5, 1).i32(6, 3),
              TStruct().i32(1, 1).i32(3, 2).str(4, "array"),
              TStruct().i32(1, 6).i32(3, 2).str(4, "tags").i32(6, 0)]
    rg = TStruct().lst(1, 12, chunks).i64(2, len(body) - 4).i64(3, 4)
    footer = TStruct().i32(1, 1).lst(2, 12, schema).i64(3, 4).lst(4, 12, [rg]).end()
    with open(path, "wb") as o:
        o.write(bytes(body) + footer + len(footer).to_bytes(4, "little") + b"PAR1")


legacy_lists(os.path.join(out, "legacy_lists.parquet"))
expected(os.path.join(out, "legacy_lists.parquet"))
readable.append("legacy_lists")

# files to refuse
write("bad_lz4", T.slice(0, 50), compression="lz4")
write("bad_brotli", T.slice(0, 50), compression="brotli")
write("bad_struct", pa.table({"s": pa.array([{"a": 1}, {"a": 2}])}))
write("bad_int96", pa.table({"t": pa.array([0, 1], pa.timestamp("ns"))}),
      use_deprecated_int96_timestamps=True)
write("bad_fixed", pa.table({"d": pa.array([decimal.Decimal("1.5")], pa.decimal128(20, 1))}))
write("bad_map", pa.table({"m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int32()))}))
write("bad_nested", pa.table({"l": pa.array([[[1]]], pa.list_(pa.list_(pa.int32())))}))
write("bad_binary", pa.table({"b": pa.array([b"ok", b"\xff\xfe"], pa.binary())}))

with open(os.path.join(out, "MANIFEST"), "w") as o:
    o.write("\n".join(readable) + "\n")
