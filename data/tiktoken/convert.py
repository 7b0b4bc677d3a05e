#!/usr/bin/env python3
"""data/tiktoken/convert.py - write the built-in tiktoken rank files
(p50k_base, cl100k_base, o200k_base) from the npm package `tiktoken`'s
encoders/*.json, and check them against the SHA-256 that Python tiktoken
checks when it downloads the same files from OpenAI.

    python3 data/tiktoken/convert.py [NPM_TIKTOKEN_DIR]

NPM_TIKTOKEN_DIR defaults to build/tokref/npm/node_modules/tiktoken (what
tools/tokref.sh installs). Run once; the outputs are committed and embedded
in the library (src/base/tokenizer/tok_tiktoken_data.c). Only the standard
library is needed.

The npm files hold the ranks in a compact text ("bpe_ranks"): lines of
"! OFFSET TOKEN TOKEN ...", each TOKEN base64, ranks OFFSET, OFFSET+1, ...
The output is tiktoken's own format: "BASE64 RANK" per line, in rank order,
byte for byte the file tiktoken downloads (hence the same SHA-256).
r50k_base is GPT-2 (data/gpt2/vocab.bpe, embedded already) and p50k_edit
has p50k_base's ranks: neither needs a file of its own.
"""
import hashlib
import json
import os
import sys

# tiktoken_ext/openai_public.py (tiktoken 0.14.0): expected_hash of each file
EXPECTED = {
    "p50k_base": "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build/tokref/npm/node_modules/tiktoken")
    for name, want in EXPECTED.items():
        with open(os.path.join(src, "encoders", name + ".json"), encoding="utf-8") as f:
            d = json.load(f)
        out = []
        for line in d["bpe_ranks"].split("\n"):
            if not line:
                continue
            parts = line.split(" ")
            offset = int(parts[1])
            for i, tok in enumerate(parts[2:]):
                out.append(f"{tok} {offset + i}\n")
        data = "".join(out).encode("ascii")
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            sys.exit(f"{name}: sha256 {got}, expected {want} (tiktoken's)")
        with open(os.path.join(here, name + ".tiktoken"), "wb") as f:
            f.write(data)
        print(f"{name}.tiktoken: {len(out)} ranks, {len(data)} bytes, sha256 {got} (as tiktoken's)")


if __name__ == "__main__":
    main()
