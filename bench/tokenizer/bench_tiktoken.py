#!/usr/bin/env python3
"""bench_tiktoken.py - single-thread MB/s of Python tiktoken (its Rust core)
on the benchmark text, for the encodings Zephon ships; run by run.sh with
tools/tokref.sh's Python.

    bench_tiktoken.py TOKREF_DIR TEXT.jsonl [PASSES]

Prints "ENCODING_mbps X", "ENCODING_cpu_mbps X" and "ENCODING_tokens N"
lines (MB = 10^6 bytes; best of PASSES, default 3; encode_ordinary, one
document at a time). The Encoding is built from the npm package's ranks
(tiktoken cannot download them here).
"""
import base64
import json
import os
import sys
import time

import tiktoken

tokref, path = sys.argv[1], sys.argv[2]
passes = int(sys.argv[3]) if len(sys.argv) > 3 else 3
docs = [json.loads(l)["text"] for l in open(path, encoding="utf-8") if l.strip()]
nbytes = sum(len(d.encode("utf-8")) for d in docs)
for name in ("r50k_base", "cl100k_base", "o200k_base"):
    with open(os.path.join(tokref, "npm/node_modules/tiktoken/encoders", name + ".json")) as f:
        d = json.load(f)
    ranks = {}
    for line in d["bpe_ranks"].split("\n"):
        if line:
            p = line.split(" ")
            for i, t in enumerate(p[2:]):
                ranks[base64.b64decode(t)] = int(p[1]) + i
    enc = tiktoken.Encoding(name, pat_str=d["pat_str"], mergeable_ranks=ranks,
                            special_tokens=d["special_tokens"])
    best = best_cpu = float("inf")
    tokens = 0
    for _ in range(passes):
        t0, c0 = time.perf_counter(), time.process_time()
        tokens = sum(len(enc.encode_ordinary(x)) for x in docs)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    key = "gpt2" if name == "r50k_base" else name
    print(f"{key}_mbps {nbytes / best / 1e6:.2f}")
    print(f"{key}_cpu_mbps {nbytes / best_cpu / 1e6:.2f}")
    print(f"{key}_tokens {tokens}")
