#!/usr/bin/python3
"""Proves that pybpe gives the ids of `zephon tokenize`, record for record.

    /usr/bin/python3 bench/python/check_pybpe.py ZEPHON_BINARY WORK_DIR

1. `zephon gen --out WORK_DIR/data --format jsonl --shards 2 --samples-per-shard 200 --seed 3`
2. WORK_DIR/hard.jsonl: hand-written hard strings (contractions, digits,
   whitespace runs and every kind of space, emoji, CJK, scripts with combining
   marks, astral letters and digits, long runs, `<|endoftext|>`, code).
3. `zephon tokenize --threads 1 FILE` on each file; every record's ids must
   equal pybpe's, in every configuration of the encoder (the `re`
   pre-tokenizer with and without the segment cache, and the `regex` module's
   GPT-2 pattern when python3-regex is installed), each with a cold and a
   warm cache.

4. The repository's tokenizer corpus (tests/data/tokenizer/corpus.jsonl, 306
   lines) against tiktoken's ids (expected.jsonl): every line must agree
   except lines holding characters that Python's Unicode tables (14.0 for
   unicodedata, 15.0 for regex) do not know but Zephon's (16.0) do; those
   are listed, not failed.

Exit status 0 when all agree; 1 with the first difference (file, line, text,
both id lists, first differing position).
"""

import json
import os
import unicodedata
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pybpe  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HARD = [
    "Hello world",
    "",
    " ",
    "I'm sure you're right, we've seen they'll say he'd know it's 'tis",
    "CAPS DON'T SPLIT 'S 'T 'RE 'VE 'M 'LL 'D the same way",
    "curly quotes: it\u2019s, don\u2019t, \u201cquoted\u201d",
    "'s's'''s 'sss' ''",
    "digits 0 1 12 123 1234 12345 3.14159 1,000,000 -42 +7e10 0x1F 2024-01-31",
    "\u0661\u0662\u0663 \u0966\u0967 \u00b2\u00b3 \u00bd \u2167 \u2460",
    "a  b   c    d     e",
    "  leading spaces",
    "trailing spaces   ",
    "\t\ttabs\tand spaces \t mixed\t",
    "line\n\n\nnext\n \n  \n",
    "crlf\r\nline\r\n\r\n",
    "nbsp\u00a0here\u00a0 and\u00a0\u00a0there",
    "nel\u0085x space+nel \u0085y \u0085\u0085z",
    "ideographic\u3000space \u3000x",
    "zero\u200bwidth bom\ufeffinside \u180emongolian",
    "em\u2003space thin\u2009space line\u2028sep para\u2029sep",
    "\x0b\x0c vertical tab and form feed \x1c\x1d\x1e\x1f unit separators",
    "emoji \U0001F600\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EB\U0001F1F7 \u2728\U0001F680!",
    "\U0001F600\U0001F600\U0001F600 x\U0001F600y \U0001F600 \U0001F600",
    "\u5317\u4eac\u6771\u4eac \u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002 \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea \u0939\u093f\u0928\u094d\u0926\u0940 \u0ba4\u0bae\u0bbf\u0bb4\u0bcd",
    "caf\u00e9 cafe\u0301 na\u00efve \u00fcber \u00e7a \u00e3o \u03b1\u03bb\u03c6\u03b1 \u041c\u043e\u0441\u043a\u0432\u0430",
    "astral letters \U0001D49C\U0001D4B7 \U00020000\U00020001 digits \U0001D7D9\U0001D7DA \U00010107",
    "mixed a\U0001D49Cb 1\U0001D7D92 !\U0001F600? \U0001D49C\U0001F600\U0001D7D9",
    "<|endoftext|> is ordinary text here <|endoftext|>",
    "def f(x):\n    return x ** 2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%a%';",
    '{"key": [1, 2, 3], "nested": {"a": null}}',
    "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
    "!!!!!!!!!!!!!!!!!!!!???....,,,,;;;::: ---- ____ ==== ****",
    "a" * 3000,
    " " * 50 + "x",
    "\n" * 40,
    "x" + " " * 37,
    "antidisestablishmentarianism supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis",
    "The quick brown fox jumps over the lazy dog. " * 20,
    "\u00a0 \u00a0 a \u3000 b",
    "word\u00a0 word\t word\n word",
]


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit("check_pybpe: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr.decode(errors="replace")))
    return r.stdout.decode()


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: check_pybpe.py ZEPHON_BINARY WORK_DIR")
    zephon, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "data")
    run([zephon, "gen", "--out", data, "--format", "jsonl", "--shards", "2", "--samples-per-shard", "200",
         "--seed", "3"])
    hard = os.path.join(work, "hard.jsonl")
    with open(hard, "w", encoding="utf-8") as f:
        for i, text in enumerate(HARD):
            f.write(json.dumps({"id": i, "text": text}) + "\n")
    files = [os.path.join(data, "shard-00000.jsonl"), os.path.join(data, "shard-00001.jsonl"), hard]

    configs = [("re+segments", dict(pretokenizer="re", segments=True)),
               ("re", dict(pretokenizer="re", segments=False))]
    try:
        import regex  # noqa: F401
        configs.append(("regex", dict(pretokenizer="regex", segments=False)))
    except ImportError:
        print("check_pybpe: python3-regex not installed; the regex pre-tokenizer is not checked")
    gpt2 = os.path.join(REPO, "data", "gpt2")
    encoders = [(name, pybpe.Encoder(gpt2, **kw)) for name, kw in configs]

    records = tokens = 0
    for path in files:
        expected = [json.loads(line) for line in run([zephon, "tokenize", "--threads", "1", path]).splitlines()]
        with open(path, encoding="utf-8") as f:
            texts = [json.loads(line)["text"] for line in f if line.strip()]
        if len(texts) != len(expected):
            print("check_pybpe: %s: %d records, zephon printed %d lines" % (path, len(texts), len(expected)))
            return 1
        for name, enc in encoders:
            for temp in ("cold", "warm"):
                if temp == "cold":
                    enc._cache.clear()
                    if enc._segments is not None:
                        enc._segments.clear()
                for line, (text, want) in enumerate(zip(texts, expected), 1):
                    got = enc.encode(text)
                    if got != want:
                        i = first_diff(got, want)
                        print("check_pybpe: MISMATCH (%s, %s cache) %s:%d\n  text: %r\n  zephon: %s\n  pybpe:  %s\n"
                              "  first difference at id %d: zephon %s, pybpe %s"
                              % (name, temp, path, line, text[:300], want[:60], got[:60], i,
                                 want[i:i + 5], got[i:i + 5]))
                        return 1
        records += len(texts)
        tokens += sum(map(len, expected))
        print("check_pybpe: %s: %d records, %d tokens: identical" % (os.path.relpath(path, work), len(texts),
                                                                   sum(map(len, expected))))
    corpus = os.path.join(REPO, "tests", "data", "tokenizer", "corpus.jsonl")
    expected_path = os.path.join(REPO, "tests", "data", "tokenizer", "expected.jsonl")
    if os.path.exists(corpus) and os.path.exists(expected_path):
        with open(corpus, encoding="utf-8") as f:
            texts = [json.loads(line)["text"] for line in f]
        with open(expected_path, encoding="utf-8") as f:
            expected = [json.loads(line)["ids"] for line in f]
        for name, enc in encoders:
            newer = []
            for line, (text, want) in enumerate(zip(texts, expected), 1):
                got = enc.encode(text)
                if got == want:
                    continue
                unknown = sorted({"U+%04X" % ord(c) for c in text if unicodedata.category(c) == "Cn"})
                if not unknown:
                    i = first_diff(got, want)
                    print("check_pybpe: MISMATCH (%s) with tiktoken's ids, corpus.jsonl:%d\n  text: %r\n"
                          "  first difference at id %d: tiktoken %s, pybpe %s"
                          % (name, line, text[:300], i, want[i:i + 5], got[i:i + 5]))
                    return 1
                newer.append("%d (%s)" % (line, " ".join(unknown[:4])))
            print("check_pybpe: corpus.jsonl (%s): %d lines identical to tiktoken; differing only where Python's "
                  "Unicode %s tables lack newer characters: line %s"
                  % (name, len(texts) - len(newer), unicodedata.unidata_version, ", ".join(newer) or "none"))
    print("check_pybpe: OK: %d records, %d tokens, identical to zephon tokenize in %d configurations (%s), "
          "cold and warm caches" % (records, tokens, len(encoders), ", ".join(n for n, _ in encoders)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
