#!/usr/bin/env python3
"""Shuffle quality of sample orders (zephon run --emit-ids files: one
"shard:record" per line), printed for each file given:

  same shard   fraction of adjacent output pairs from the same shard (a
               uniform mix of a block's 8 equal shards: about 1/8);
  corr         mean over shards of the Spearman correlation between a
               record's place in its shard and its place in the output (0:
               the shard's records come in no particular order; 1: in the
               shard's own order). Rounds of segments make a shard's early
               records come out earlier: this is their cost;
  displacement mean |output place - place in the shard-ordered stream| / N
               (N samples); a uniform shuffle of everything gives 1/3.
"""
import sys


def ranks(xs):
    order = sorted(range(len(xs)), key=xs.__getitem__)
    r = [0] * len(xs)
    for k, i in enumerate(order):
        r[i] = k
    return r


def spearman(a, b):
    n = len(a)
    if n < 3:
        return 0.0
    ra, rb = ranks(a), ranks(b)
    d2 = sum((x - y) ** 2 for x, y in zip(ra, rb))
    return 1 - 6 * d2 / (n * (n * n - 1))


def quality(path):
    ids = [line.strip().rsplit(":", 1) for line in open(path) if line.strip()]
    n = len(ids)
    same = sum(1 for i in range(1, n) if ids[i][0] == ids[i - 1][0]) / max(n - 1, 1)
    per = {}
    for pos, (s, r) in enumerate(ids):
        per.setdefault(s, []).append((int(r), pos))
    corr = sum(spearman([r for r, _ in v], [p for _, p in v]) for v in per.values()) / len(per)
    # place in the stream of shards in name order, records in order
    base, at = {}, 0
    for s in sorted(per):
        base[s] = at
        at += len(per[s])
    disp = sum(abs(pos - (base[s] + int(r))) for pos, (s, r) in enumerate(ids)) / n / n
    return n, same, corr, disp


print("%-10s %9s %10s %8s %13s" % ("order", "samples", "same shard", "corr", "displacement"))
for label, path in zip(["whole", "segments", "c", "d"], sys.argv[1:]):
    n, same, corr, disp = quality(path)
    print("%-10s %9d %10.3f %8.3f %13.3f" % (label, n, same, corr, disp))
