"""A pure-Python GPT-2 byte-level BPE encoder: the baseline for the Python benchmark.

The fastest pure-Python encoder we could write, to compare Zephon against an
honest, strong reference (issue 12, benchmark 7). No C extension of our own, no
tiktoken or tokenizers: the standard library only (`re`, `json`, ...). The
`regex` module (Debian's python3-regex), which GPT-2's own reference encoder
uses for its pre-tokenization pattern, is the optional reference
(`pretokenizer="regex"`), slower here.

    enc = Encoder("data/gpt2")         # encoder.json + vocab.bpe
    ids = enc.encode("Hello world")    # [15496, 995]
    enc.eot                             # 50256, never produced by encode()

Exactness: the same ids as `zephon tokenize` (tiktoken's gpt2 encoding);
bench/python/check_pybpe.py checks it.

How it is fast:
- Pre-tokenization is one `findall` (C code) per text, with the standard
  library's `re` rather than `regex` (2.3x faster here): `re` has no \p{L},
  so the pattern spells the letter, number and White_Space classes out for the
  Basic Multilingual Plane (built from `unicodedata` at load time; `re` then
  tests a character with one table lookup). A text with characters above
  U+FFFF (emoji, ...) is first copied with each such character replaced by a
  BMP stand-in of the same class ('a', '0' or U+FFFD), and the pieces found in
  the copy are cut from the original. `pretokenizer="regex"` runs GPT-2's
  pattern with the `regex` module instead (the reference; same pieces).
- Segment cache: when no space follows a White_Space character in the text
  (one `re.search`), every U+0020 of the text starts a piece (a space after
  a non-space never joins the piece before it, and only whitespace runs hold
  a space that does not start their piece). The text is then cut with
  `str.split(" ")` and each segment (" word.", " it,", ...) is looked up in a
  segment cache, whose misses run the pre-tokenizer on the segment alone
  (its pieces are the same: the (?!\\S) lookahead sees a space or the end,
  both not \\S). Texts with such spaces take the plain path below.
  `segments=False` turns this off.
- Every piece goes through a piece cache: a dict subclass whose __missing__
  runs BPE, so a hit costs one C-level dict lookup inside `map`, and the ids
  of a whole text are gathered with `itertools.chain.from_iterable` without a
  Python-level loop per piece. The cache is bounded (cleared when it exceeds
  `cache_size` entries).
- A miss first maps the piece's UTF-8 bytes to GPT-2's byte alphabet with
  `bytes.decode("latin-1").translate(table)` (C code), and returns the token
  directly when the whole piece is one token.
- Otherwise BPE runs on integer ids: the merge table is keyed by
  `left_id << 16 | right_id` (ints hash for free, no string concatenation);
  the ranks of the adjacent pairs sit in a list, each round takes the lowest
  with `min()` and its leftmost position with `list.index()` (both C loops),
  merges, and looks up only the two pairs next to the merge. This is the
  classic greedy lowest-rank (leftmost on ties) loop, O(n) per merge in C.
"""

import itertools
import json
import os
import re
import unicodedata

# GPT-2's pre-tokenization pattern. The `regex` module's \s is Unicode
# White_Space (U+0085 and U+00A0 are space, U+FEFF and U+200B are not), like
# the Rust regex that tiktoken runs.
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

_INF = 1 << 30

# Unicode White_Space (what \s means in the pattern): 25 code points.
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _class_ranges(first):
    """Character-class text of the BMP code points whose general category
    starts with `first` ('L' or 'N')."""
    out = []
    start = None
    for cp in range(0x10001):
        inside = cp < 0x10000 and unicodedata.category(chr(cp))[0] == first
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            last = cp - 1
            out.append("\\u%04x" % start if start == last else "\\u%04x-\\u%04x" % (start, last))
            start = None
    return "".join(out)


def bmp_pattern():
    """GPT-2's pattern for `re`, exact on text without characters above U+FFFF."""
    letters, numbers, ws = _class_ranges("L"), _class_ranges("N"), _WHITE_SPACE
    # The letter alternative comes first (most pieces are words; 1.7x faster
    # than the pattern's order): no piece of it starts with an apostrophe, so
    # the contractions, which do, still win wherever they match.
    return re.compile(
        " [" + letters + "]+|[" + letters + "]+"
        "|'(?:[stmd]|re|ve|ll)"
        "| ?[" + numbers + "]+"
        "| ?[^" + ws + letters + numbers + "]+"
        "|[" + ws + "]+(?![^" + ws + "])"
        "|[" + ws + "]+")


def bytes_to_unicode():
    """GPT-2's byte alphabet: printable bytes stand for themselves, the others
    (controls, space, 0x7f-0xa0, 0xad) are shifted to U+0100 and up."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {}
    n = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


class _Cache(dict):
    """str -> tuple of ids; a miss calls `compute` (dict calls __missing__).
    Bounded: emptied when it holds `limit` entries."""

    __slots__ = ("compute", "limit")

    def __missing__(self, key):
        ids = self.compute(key)
        if len(self) >= self.limit:
            self.clear()
        self[key] = ids
        return ids


class Encoder:
    eot = 50256

    def __init__(self, data_dir, cache_size=1 << 18, pretokenizer="re", segments=True):
        with open(os.path.join(data_dir, "encoder.json"), encoding="utf-8") as f:
            encoder = json.load(f)
        with open(os.path.join(data_dir, "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        byte_char = bytes_to_unicode()
        # str.translate table: latin-1 character of a byte -> GPT-2 alphabet.
        self._table = {b: ord(c) for b, c in byte_char.items()}
        self._encoder = encoder
        self._byte_id = [encoder[byte_char[b]] for b in range(256)]
        pair_rank = {}   # left_id << 16 | right_id -> rank
        merged = []      # rank -> id of the merged token
        for line in lines:
            if not line:
                continue
            a, b = line.split(" ")
            key = encoder[a] << 16 | encoder[b]
            if key not in pair_rank:          # the first (lowest) rank counts
                pair_rank[key] = len(merged)
                merged.append(encoder[a + b])
        self._pair_rank = pair_rank
        self._merged = merged
        if pretokenizer == "regex":
            import regex
            self._split = regex.compile(PATTERN).findall
        elif pretokenizer == "re":
            self._bmp = bmp_pattern().findall
            self._standin = {}
            self._split = self._split_re
        else:
            raise ValueError("pretokenizer must be 're' or 'regex'")
        self._cache = _Cache()
        self._cache.compute = self._bpe
        self._cache.limit = cache_size
        self._segments = None
        if segments:
            self._segments = _Cache()
            self._segments.compute = self._segment_ids
            self._segments.limit = cache_size
        self._space_after_ws = re.compile("[" + _WHITE_SPACE + "] ").search
        self.eot = encoder.get("<|endoftext|>", Encoder.eot)

    def _standin_of(self, m):
        c = m.group()
        r = self._standin.get(c)
        if r is None:
            k = unicodedata.category(c)[0]
            r = self._standin[c] = "a" if k == "L" else "0" if k == "N" else "\ufffd"
        return r

    def _split_re(self, text):
        """GPT-2's pieces of `text` (the same as PATTERN's findall)."""
        if text.isascii() or not _ASTRAL.search(text):
            return self._bmp(text)
        ends = list(itertools.accumulate(map(len, self._bmp(_ASTRAL.sub(self._standin_of, text)))))
        return [text[a:b] for a, b in zip([0] + ends, ends)]

    def _bpe(self, piece):
        raw = piece.encode("utf-8")
        whole = self._encoder.get(raw.decode("latin-1").translate(self._table))
        if whole is not None:
            return (whole,)
        byte_id = self._byte_id
        ids = [byte_id[c] for c in raw]
        get = self._pair_rank.get
        ranks = [get(a << 16 | b, _INF) for a, b in zip(ids, ids[1:])]
        merged = self._merged
        while ranks:
            r = min(ranks)
            if r == _INF:
                break
            i = ranks.index(r)
            ids[i] = m = merged[r]
            del ids[i + 1]
            del ranks[i]
            if i < len(ranks):
                ranks[i] = get(m << 16 | ids[i + 1], _INF)
            if i:
                ranks[i - 1] = get(ids[i - 1] << 16 | m, _INF)
        return tuple(ids)

    def _segment_ids(self, seg):
        """Ids of a space-delimited segment (piece cache per piece)."""
        return tuple(itertools.chain.from_iterable(map(self._cache.__getitem__, self._split(seg))))

    def encode(self, text):
        """The ids of `text` (a str) as a list; EOT is never produced."""
        out = []
        self.encode_extend(text, out)
        return out

    def encode_extend(self, text, out):
        """Append the ids of `text` to `out` (a list or array.array); returns
        the number of ids appended."""
        n = len(out)
        if self._segments is not None and self._space_after_ws(text) is None:
            segs = text.split(" ")
            get = self._segments.__getitem__
            if segs[0]:
                out.extend(get(segs[0]))
            out.extend(itertools.chain.from_iterable(map(get, map(" ".__add__, itertools.islice(segs, 1, None)))))
        else:
            out.extend(itertools.chain.from_iterable(map(self._cache.__getitem__, self._split(text))))
        return len(out) - n

    def decode(self, ids):
        """Bytes of `ids` (for tests)."""
        if not hasattr(self, "_decoder"):
            inv = {ord(c): b for b, c in bytes_to_unicode().items()}
            self._decoder = {i: bytes(inv[ord(ch)] for ch in tok) for tok, i in self._encoder.items()}
        return b"".join(self._decoder[i] for i in ids)


def _main():
    """python3 pybpe.py DATA_DIR FILE.jsonl... [--passes N]: MB/s of text on one
    core (the best of N passes; every pass starts with empty caches)."""
    import argparse
    import time

    ap = argparse.ArgumentParser(description=_main.__doc__)
    ap.add_argument("data_dir")
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--field", default="text")
    ap.add_argument("--pretokenizer", default="re", choices=["re", "regex"])
    ap.add_argument("--no-segments", action="store_true", help="no segment cache")
    args = ap.parse_args()
    t0 = time.perf_counter()
    enc = Encoder(args.data_dir, pretokenizer=args.pretokenizer, segments=not args.no_segments)
    load = time.perf_counter() - t0
    texts = []
    for path in args.jsonl:
        with open(path, encoding="utf-8") as f:
            texts += [json.loads(line)[args.field] for line in f if line.strip()]
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    best = None
    for p in range(args.passes):
        enc._cache.clear()                      # every pass starts cold
        if enc._segments is not None:
            enc._segments.clear()
        t0 = time.perf_counter()
        c0 = time.process_time()
        ntok = 0
        for t in texts:
            ntok += len(enc.encode(t))
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        if best is None or wall < best[0]:
            best = (wall, cpu)
    print(json.dumps({"docs": len(texts), "mb": nbytes / 1e6, "tokens": ntok, "load_s": round(load, 3),
                      "wall_s": round(best[0], 3), "mb_per_s": round(nbytes / 1e6 / best[0], 3),
                      "mb_per_cpu_s": round(nbytes / 1e6 / best[1], 3), "passes": args.passes,
                      "pretokenizer": args.pretokenizer, "segments": not args.no_segments}))


if __name__ == "__main__":
    _main()
