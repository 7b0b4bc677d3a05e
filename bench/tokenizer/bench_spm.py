#!/usr/bin/env python3
"""bench_spm.py - SentencePiece .model encoding speed, Zephon against Python
sentencepiece, one thread each, in one run (issue 21 item 4).

usage (with tools/tokref.sh's venv Python, which has sentencepiece):
  bench_spm.py SPM_CHECK TEXT.jsonl OUTDIR [MEGABYTES=4] [SECS=3]

SPM_CHECK: the tests' helper (build/<dir>/spm_check), or several as
LABEL=PATH,LABEL=PATH (e.g. builds before and after a change: one row each). TEXT.jsonl: the
benchmark text of bench/tokenizer/gen_text.mjs ({"text": ...} per line).
OUTDIR keeps the models between runs: a Unigram and a BPE model (vocab
8,000) trained by Debian's spm_train on the text's first 2 MB, and a
Unigram model of 262,144 pieces (the trained one plus synthetic pieces
appended as ModelProto field 1) to time loading a large vocabulary.

Prints per model: Zephon, sentencepiece and HF tokenizers MB/s (wall clock
and CPU time of the thread; HF: the model converted by hf_of_spm, one
encode() per document in this thread), the ratios of CPU-time figures
(Zephon / sentencepiece, Zephon / HF), the token counts (Zephon's and
sentencepiece's must be equal: the script fails otherwise), the documents
where HF's ids differ from sentencepiece's, and load times.
"""
import json
import os
import random
import struct
import subprocess
import sys
import time

import sentencepiece as spm
from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def docs_of(path, limit):
    out, n = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            t = json.loads(line)["text"].encode("utf-8", "surrogatepass")
            out.append(t)
            n += len(t)
            if n >= limit:
                break
    return out


def varint(v):
    b = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            b.append(c | 0x80)
        else:
            b.append(c)
            return bytes(b)


def piece_msg(text, score):
    body = b"\x0a" + varint(len(text)) + text + b"\x15" + struct.pack("<f", score)
    return b"\x0a" + varint(len(body)) + body


def big_model(src, dst, total):
    """src's pieces plus synthetic ones (letters, U+2581-led) up to total."""
    sp = spm.SentencePieceProcessor(model_file=src)
    have = set(sp.id_to_piece(i) for i in range(sp.get_piece_size()))
    r = random.Random(262144)
    extra = []
    letters = "abcdefghijklmnopqrstuvwxyz\u00e9\u00fc\u4e00\u4e8c\u0430\u0431"
    while len(have) < total:
        w = ("\u2581" if r.random() < 0.6 else "") + "".join(
            r.choice(letters) for _ in range(r.randint(2, 12)))
        if w in have:
            continue
        have.add(w)
        extra.append(piece_msg(w.encode(), -20.0 - r.random() * 5))
    with open(dst, "wb") as f:
        f.write(open(src, "rb").read())
        f.write(b"".join(extra))


def pb_fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint_at(buf, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint_at(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = varint_at(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        yield f, wt, v

def varint_at(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1
        r |= (c & 0x7F) << s; s += 7
        if not c & 0x80:
            return r, i

def hf_of_spm(path):
    """The HF tokenizers equivalent of a .model, built from its pieces as
    tokenizers' SentencePieceUnigramTokenizer.from_spm (Unigram) and
    transformers' SentencePieceExtractor (BPE merges from the pieces, by
    score) do, without protobuf: the charsmap is read by pb_fields."""
    buf = open(path, "rb").read()
    cm, remove_ws = b"", True
    for f, wt, v in pb_fields(buf):
        if f == 3:
            for f2, wt2, v2 in pb_fields(v):
                if f2 == 2: cm = bytes(v2)
                if f2 == 4: remove_ws = v2 != 0
    sp = spm.SentencePieceProcessor(model_file=path)
    n = sp.get_piece_size()
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(n)]
    unk = sp.unk_id()
    bf = any(sp.is_byte(i) for i in range(n))
    t = sp_type(path)
    if t == 1:
        tok = Tokenizer(models.Unigram(pieces, unk, bf))
    else:
        vocab = {p: i for i, (p, _) in enumerate(pieces)}
        merges = []
        for merge, (_, score) in zip(vocab, pieces):
            local = [(merge[:k], merge[k:], score) for k in range(1, len(merge))
                     if merge[:k] in vocab and merge[k:] in vocab]
            local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
            merges += local
        merges.sort(key=lambda x: x[2], reverse=True)
        tok = Tokenizer(models.BPE(vocab, [(a, b) for a, b, _ in merges], unk_token=pieces[unk][0],
                                   fuse_unk=True, byte_fallback=bf))
    norm = [normalizers.Precompiled(cm)] if cm else []
    if remove_ws:
        norm += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    tok.normalizer = normalizers.Sequence(norm)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    return tok, sp

def sp_type(path):
    for f, wt, v in pb_fields(open(path, "rb").read()):
        if f == 2:
            for f2, wt2, v2 in pb_fields(v):
                if f2 == 3: return v2
    return 1


def main():
    if len(sys.argv) < 4:
        fail("usage: bench_spm.py SPM_CHECK TEXT.jsonl OUTDIR [MEGABYTES] [SECS]")
    helpers = [h.split("=", 1) if "=" in h else ["zephon", h] for h in sys.argv[1].split(",")]
    helper = helpers[-1][1]
    text, outdir = sys.argv[2], sys.argv[3]
    mb = float(sys.argv[4]) if len(sys.argv) > 4 else 4.0
    secs = float(sys.argv[5]) if len(sys.argv) > 5 else 3.0
    os.makedirs(outdir, exist_ok=True)
    docs = docs_of(text, int(mb * 1e6))
    nbytes = sum(len(d) for d in docs)
    train_txt = os.path.join(outdir, "train.txt")
    if not os.path.exists(train_txt):
        with open(train_txt, "w", encoding="utf-8") as f:
            for d in docs_of(text, 2_000_000):
                for line in d.decode("utf-8", "replace").split("\n"):
                    if line.strip():
                        f.write(line + "\n")
    in_path = os.path.join(outdir, "docs.bin")
    with open(in_path, "wb") as f:
        for d in docs:
            f.write(struct.pack("<I", len(d)) + d)
    print("text: %s, %d documents, %.2f MB; one thread each; MB/s = input bytes / time"
          % (os.path.basename(text), len(docs), nbytes / 1e6), flush=True)
    print("%-18s %8s %8s %8s %8s %8s %8s %7s %7s %9s %9s %7s %8s %8s" % (
        "model", "zephon", "(CPU)", "spm py", "(CPU)", "hf py", "(CPU)", "x spm", "x hf",
        "tokens", "spm tok", "hf diff", "load", "spm load"))
    models = []
    for mt in ("unigram", "bpe"):
        prefix = os.path.join(outdir, mt)
        if not os.path.exists(prefix + ".model"):
            subprocess.run(["spm_train", "--input=" + train_txt, "--model_prefix=" + prefix,
                            "--model_type=" + mt, "--vocab_size=8000", "--minloglevel=2",
                            "--num_threads=2", "--input_sentence_size=0",
                            "--character_coverage=0.9995", "--byte_fallback=true"],
                           check=True, stdout=subprocess.DEVNULL)
        models.append((mt, prefix + ".model"))
    big = os.path.join(outdir, "unigram262k.model")
    if not os.path.exists(big):
        big_model(models[0][1], big, 262144)
    for name, model in models:
        t0 = time.perf_counter()
        sp = spm.SentencePieceProcessor(model_file=model)
        sload = time.perf_counter() - t0
        w0, c0, done, stok, passes = time.perf_counter(), time.thread_time(), 0, 0, 0
        while True:
            for d in docs:
                ids = sp.encode(d)
                if passes == 0:
                    stok += len(ids)
            done += nbytes
            passes += 1
            if time.perf_counter() - w0 >= secs:
                break
        sw = done / (time.perf_counter() - w0) / 1e6
        sc = done / (time.thread_time() - c0) / 1e6
        hf, _ = hf_of_spm(model)
        sdocs = [d.decode("utf-8", "surrogatepass") for d in docs]
        hdiff = sum(1 for d, s in zip(docs, sdocs)
                    if hf.encode(s, add_special_tokens=False).ids != sp.encode(d))
        w0, c0, done = time.perf_counter(), time.thread_time(), 0
        while True:
            for s in sdocs:
                hf.encode(s, add_special_tokens=False)
            done += nbytes
            if time.perf_counter() - w0 >= secs:
                break
        hw = done / (time.perf_counter() - w0) / 1e6
        hc = done / (time.thread_time() - c0) / 1e6
        for label, path in helpers:
            p = subprocess.run([path, "--bench", model, in_path, str(secs)],
                               stdout=subprocess.PIPE, text=True)
            if p.returncode != 0:
                fail("%s: spm_check exited %d: %s" % (name, p.returncode, p.stdout))
            z = p.stdout.split()
            zw, zc = float(z[0]), float(z[3])
            ztok, zload = int(z[z.index("tokens") - 1]), float(z[-2])
            print("%-18s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %7.1f %7.1f %9d %9d %7d %7.3fs %7.3fs"
                  % (name + " " + label, zw, zc, sw, sc, hw, hc, zc / sc, zc / hc, ztok, stok,
                     hdiff, zload, sload), flush=True)
            if ztok != stok:
                fail("%s: token counts differ (zephon %d, sentencepiece %d)" % (name, ztok, stok))
    loads = []
    for _ in range(5):
        p = subprocess.run([helper, big], stdout=subprocess.PIPE, text=True)
        if p.returncode != 0:
            fail("262k model: %s" % p.stdout)
        loads.append((float(p.stdout.split()[-1]), float(p.stdout.split()[-2])))
    t0 = time.perf_counter()
    sp = spm.SentencePieceProcessor(model_file=big)
    sload = time.perf_counter() - t0
    loads.sort()
    print("load of a %d-piece Unigram model (%.1f MB): zephon %.3f s CPU (wall %.3f s; median "
          "of 5), sentencepiece %.3f s wall" % (sp.get_piece_size(), os.path.getsize(big) / 1e6,
                                                loads[2][0], loads[2][1], sload))


if __name__ == "__main__":
    main()
