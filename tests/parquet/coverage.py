"""Check that the Parquet test corpus covers what the reader must read.

    python coverage.py FILE...

Reads each file's footer with DuckDB (parquet_metadata: an independent
reader of the metadata) and walks each column chunk's page headers (Thrift
compact protocol, read here), and prints one line per file: row groups,
pages by type, codecs and encodings. Exit 1 when the files together lack a
codec (SNAPPY, GZIP, ZSTD, UNCOMPRESSED), an encoding (PLAIN, RLE_DICTIONARY
or PLAIN_DICTIONARY, DELTA_BINARY_PACKED, DELTA_LENGTH_BYTE_ARRAY,
DELTA_BYTE_ARRAY), a page type (DATA_PAGE, DATA_PAGE_V2, DICTIONARY_PAGE), a
chunk whose dictionary fell back to PLAIN (data pages of both encodings), a
file of several row groups or a column chunk of many (>= 20) data pages: a
writer upgrade that silently stopped writing one of them would otherwise
leave it untested.
"""
import os
import sys

import duckdb

NEED_CODECS = {"SNAPPY", "GZIP", "ZSTD", "UNCOMPRESSED"}
PAGE_TYPES = {0: "DATA_PAGE", 1: "INDEX_PAGE", 2: "DICTIONARY_PAGE", 3: "DATA_PAGE_V2"}
NEED_PAGES = {"DATA_PAGE", "DATA_PAGE_V2", "DICTIONARY_PAGE", "dictionary fallback"}
NEED_ENCODINGS = {"PLAIN", "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"}


class Compact:
    """Just enough of Thrift's compact protocol to skip a struct and read a
    PageHeader's first fields (1: type, 3: compressed_page_size)."""

    def __init__(self, buf, pos):
        self.buf, self.pos = buf, pos

    def byte(self):
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self):
        v = shift = 0
        while True:
            b = self.byte()
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    def zigzag(self):
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def value(self, t):
        if t in (1, 2):
            return t == 1
        if t == 3:
            return self.byte()
        if t in (4, 5, 6):
            return self.zigzag()
        if t == 7:
            self.pos += 8
        elif t == 8:
            n = self.varint()
            self.pos += n
        elif t in (9, 10):
            h = self.byte()
            n = h >> 4 if h >> 4 != 15 else self.varint()
            for _ in range(n):
                if h & 15 in (1, 2):
                    self.byte()
                else:
                    self.value(h & 15)
        elif t == 11:
            n = self.varint()
            if n:
                kv = self.byte()
                for _ in range(n):
                    self.value(kv >> 4)
                    self.value(kv & 15)
        elif t == 12:
            return self.struct()
        else:
            raise ValueError("thrift type %d at %d" % (t, self.pos))
        return None

    def struct(self):
        fields, last = {}, 0
        while True:
            h = self.byte()
            if h == 0:
                return fields
            fid = last + (h >> 4) if h >> 4 else self.zigzag()
            last = fid
            fields[fid] = self.value(h & 15)


def pages(buf, start, size):
    """The pages of one column chunk, in order: (type, encoding of a data
    page's values or None)."""
    out, pos = [], start
    while pos < start + size:
        r = Compact(buf, pos)
        h = r.struct()
        enc = h[5][2] if 5 in h else h[8][4] if 8 in h else None
        out.append((PAGE_TYPES.get(h[1], str(h[1])), enc))
        pos = r.pos + h[3]
    return out


def main():
    con = duckdb.connect()
    codecs, encodings, page_types, multi, many = set(), set(), set(), 0, 0
    for path in sys.argv[1:]:
        rows = con.execute("SELECT row_group_id, compression, encodings, dictionary_page_offset, "
                           "data_page_offset, total_compressed_size FROM parquet_metadata(?)",
                           [path]).fetchall()
        with open(path, "rb") as f:
            buf = f.read()
        kinds, most = {}, 0
        for r in rows:
            start = r[3] if r[3] else r[4]
            p = pages(buf, start, r[5])
            most = max(most, sum(k.startswith("DATA") for k, _ in p))
            for k, _ in p:
                kinds[k] = kinds.get(k, 0) + 1
            if {e for _, e in p} >= {0, 8} or {e for _, e in p} >= {0, 2}:
                kinds["dictionary fallback"] = kinds.get("dictionary fallback", 0) + 1
        page_types |= set(kinds)
        many = max(many, most)
        groups = {r[0] for r in rows}
        c = {r[1] for r in rows}
        e = set()
        for r in rows:
            e |= {x.strip() for x in r[2].split(",")}
        codecs |= c
        encodings |= e
        multi += len(groups) > 1
        print("%s: %d row groups, pages %s (at most %d data pages a chunk); %s; %s"
              % (os.path.basename(path), len(groups), " ".join("%s %d" % kv for kv in sorted(kinds.items())),
                 most, " ".join(sorted(c)), " ".join(sorted(e))))
    missing = (NEED_CODECS - codecs) | (NEED_ENCODINGS - encodings)
    if not encodings & {"RLE_DICTIONARY", "PLAIN_DICTIONARY"}:
        missing.add("RLE_DICTIONARY or PLAIN_DICTIONARY")
    missing |= NEED_PAGES - page_types
    if not multi:
        missing.add("a file of several row groups")
    if many < 20:
        missing.add("a column chunk of 20 data pages or more")
    if missing:
        print("the corpus lacks: " + ", ".join(sorted(missing)))
        sys.exit(1)
    print("the corpus covers codecs %s, encodings %s, pages %s, up to %d data pages a chunk"
          % (" ".join(sorted(codecs)), " ".join(sorted(encodings)), " ".join(sorted(page_types)), many))


if __name__ == "__main__":
    main()
