"""The logical rows of the Parquet test corpus (tests/cli/test_parquet.sh).

Every fixture writer (write_fixtures.py, write_hyparquet.mjs) writes these
same rows; the readers (read_ref.py, read_hyparquet.mjs) and Zephon must give
them back. Deterministic: the rows depend only on N.

Columns, in schema order:
  id         int64, never null
  text       string, nullable: unicode (2-, 3- and 4-byte UTF-8, combining
             marks), quotes, backslashes, control characters, newlines,
             empty strings, and nulls
  score      float64 (shortest repr round-trips exactly)
  flag       bool
  input_ids  list<int32>: ids below 50257 (valid GPT-2 ids), some empty
  ids64      list<int64>: large and negative values, some empty
  ids16      list<uint16>: up to 65535, some empty lists and some null lists
"""
import random

COLUMNS = ["id", "text", "score", "flag", "input_ids", "ids64", "ids16"]

PIECES = [
    "plain words", "caf\u00e9 na\u00efve", "\u4e2d\u6587\u5b57\u7b26",
    "emoji \U0001F600\U0001F680", "e\u0301 combining", "quote \" and \\ backslash",
    "tab\there", "line\nbreak", "crlf\r\nline", "\u0001\u001f control",
    "\u00a0nbsp", "\u2028sep\u2029", "<|endoftext|> literal", "/slash/",
    "{\"json\": [1, 2]}", "  spaces  ", "\U00010348 gothic", "\u0416\u0438\u0437\u043d\u044c",
]


def make_rows(n=1000):
    rnd = random.Random(25)
    rows = []
    for i in range(n):
        if i % 97 == 13:
            text = None
        elif i % 53 == 7:
            text = ""
        else:
            k = rnd.randint(1, 12)
            text = " ".join(rnd.choice(PIECES) for _ in range(k)) + " #%d" % i
        score = rnd.choice([0.0, 1.5, -2.25, 0.1, 1e-300, 123456.789e10, 2.0 / 3.0]) * (1 if i % 2 else -1) \
            + i * 0.001
        flag = (i * 7) % 3 == 0
        m = 0 if i % 11 == 5 else rnd.randint(1, 40)
        input_ids = [rnd.randrange(50257) for _ in range(m)]
        ids64 = [] if i % 13 == 3 else [rnd.randint(-2**62, 2**62) for _ in range(rnd.randint(1, 6))]
        if i % 17 == 9:
            ids16 = None
        elif i % 19 == 4:
            ids16 = []
        else:
            ids16 = [rnd.choice([0, 1, 255, 256, 32767, 32768, 65535, rnd.randrange(65536)])
                     for _ in range(rnd.randint(1, 8))]
        rows.append({"id": i, "text": text, "score": score, "flag": flag,
                     "input_ids": input_ids, "ids64": ids64, "ids16": ids16})
    return rows
