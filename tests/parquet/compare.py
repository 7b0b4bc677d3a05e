"""Compare JSON-lines row dumps with the logical rows, field by field.

    python compare.py [--by-id[=K]] [--skip-null-text] EXPECTED.jsonl WHO FILE.jsonl [WHO FILE.jsonl ...]

EXPECTED holds the logical rows (rows.jsonl). FILE is a reader's dump (DuckDB,
hyparquet or Zephon's --emit-records), one JSON object per row; WHO names it
in the messages. Each row must
have the same columns in the same order and equal values: integers and
strings exactly, floats as parsed doubles (exactly: the writers keep every
bit and the readers print the shortest repr that round-trips), lists element
by element, nulls as null. Rows are matched by position, or with --by-id by "id" when
FILE's rows come in another order (a shuffled run): then every expected row
must appear exactly once (K times, each equal, with --by-id=K: a dataset of
K files of the same rows). --skip-null-text leaves out the expected rows whose
text is null (a reader that refuses them as bad records). Prints the first
differences of each FILE naming the column and the row; exit 1 when any FILE
differs.
"""
import json
import sys


def same(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def compare(expected, who, got, by_id, copies=1):
    errors = []
    if by_id:
        seen = {}
        for r in got:
            seen.setdefault(r.get("id"), []).append(r)
        pairs = []
        for e in expected:
            rs = seen.pop(e["id"], [])
            if len(rs) != copies:
                errors.append("row id %s delivered %d times, expected %d" % (e["id"], len(rs), copies))
            else:
                pairs += [(e, r) for r in rs]
        for k in seen:
            errors.append("row id %r not in the expected rows" % (k,))
    else:
        if len(got) != len(expected):
            errors.append("%d rows, expected %d" % (len(got), len(expected)))
        pairs = list(zip(expected, got))
    for i, (e, g) in enumerate(pairs):
        if list(g.keys()) != list(e.keys()):
            errors.append("row %d: columns %s, expected %s" % (i, list(g.keys()), list(e.keys())))
            continue
        for c in e:
            if not same(e[c], g[c]):
                errors.append("row %d (id %s) column %s: %r, expected %r" % (i, e["id"], c, g[c], e[c]))
    if errors:
        print("%s: %d differences, first: %s" % (who, len(errors), "; ".join(errors[:3])))
        return False
    print("%s: %d rows equal" % (who, len(pairs)))
    return True


def main():
    args = sys.argv[1:]
    skip_null = "--skip-null-text" in args
    by_id = any(a.startswith("--by-id") for a in args)
    copies = [int(a.split("=")[1]) for a in args if a.startswith("--by-id=")] or [1]
    args = [a for a in args if not a.startswith("--")]
    expected = load(args[0])
    if skip_null:
        expected = [r for r in expected if r["text"] is not None]
    good = True
    for who, path in zip(args[1::2], args[2::2]):
        good = compare(expected, who, load(path), by_id, copies[0]) and good
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
