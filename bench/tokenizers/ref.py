#!/usr/bin/env python3
"""ref.py - single-thread MB/s of the reference implementation of each
tokenizer on the benchmark text, run by bench/tokenizers/run.sh with
tools/tokref.sh's Python (docs/tokenizers.md, "Speed").

    ref.py TOKREF_DIR TEXT.jsonl PASSES NAME=KIND:PATH...

KIND: tiktoken (PATH = an encoding name: its ranks from the npm package
tiktoken), hf (PATH = a tokenizer.json: Hugging Face tokenizers,
encode(text, add_special_tokens=False) with encode_special_tokens), spm
(PATH = a .model: sentencepiece encode). One document per call, one thread
(RAYON_NUM_THREADS=1), best of PASSES; MB = 10^6 bytes of UTF-8. Prints
"NAME mbps CPU_MBPS TOKENS IMPL" per tokenizer, or "NAME skip REASON".
"""
import base64
import json
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"


def tiktoken_enc(tokref, name):
    import tiktoken
    with open(os.path.join(tokref, "npm/node_modules/tiktoken/encoders", name + ".json")) as f:
        d = json.load(f)
    ranks = {}
    # lines "! OFFSET TOKEN TOKEN ...": base64 tokens of ranks OFFSET, OFFSET+1, ...
    for line in d["bpe_ranks"].split("\n"):
        if line:
            p = line.split(" ")
            for i, t in enumerate(p[2:]):
                ranks[base64.b64decode(t)] = int(p[1]) + i
    enc = tiktoken.Encoding(name, pat_str=d["pat_str"], mergeable_ranks=ranks,
                            special_tokens=d.get("special_tokens", {}))
    return enc.encode_ordinary, "tiktoken " + tiktoken.__version__


def hf_enc(path):
    import tokenizers
    t = tokenizers.Tokenizer.from_file(path)
    t.encode_special_tokens = True
    return (lambda s: t.encode(s, add_special_tokens=False).ids), "tokenizers " + tokenizers.__version__


def spm_enc(path):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=path)
    return sp.encode, "sentencepiece " + spm.__version__


def main():
    tokref, text, passes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    docs = [json.loads(l)["text"] for l in open(text, encoding="utf-8") if l.strip()]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    for spec in sys.argv[4:]:
        name, kp = spec.split("=", 1)
        kind, path = kp.split(":", 1)
        try:
            if kind == "tiktoken":
                enc, impl = tiktoken_enc(tokref, path)
            elif kind == "hf":
                enc, impl = hf_enc(path)
            else:
                enc, impl = spm_enc(path)
        except Exception as e:  # a missing package or file: say so, go on
            print(f"{name} skip {type(e).__name__}: {e}".replace("\n", " "), flush=True)
            continue
        best_w = best_c = 1e30
        ntok = 0
        for _ in range(passes):
            w0, c0 = time.perf_counter(), time.thread_time()
            n = 0
            for d in docs:
                n += len(enc(d))
            w, c = time.perf_counter() - w0, time.thread_time() - c0
            best_w, best_c, ntok = min(best_w, w), min(best_c, c), n
        print(f"{name} {nbytes / best_w / 1e6:.2f} {nbytes / best_c / 1e6:.2f} {ntok} "
              f"{impl.replace(' ', '-')}", flush=True)


if __name__ == "__main__":
    main()
