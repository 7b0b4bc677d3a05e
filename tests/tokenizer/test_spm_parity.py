#!/usr/bin/env python3
"""test_spm_parity.py - SentencePiece .model parity (issue 21): Zephon's ids
equal Google SentencePiece's (Python sentencepiece, pinned by tools/tokref.sh)
for BPE and Unigram models trained here with Debian's spm_train, on the
hostile corpus (tests/data/tokenizer/corpus.jsonl), cases of our own (invalid
UTF-8, special-piece strings as text, long words and lines, NFKC) and 5,000
random strings from a fixed seed, and 24 long documents (Unigram path scores
past the rescaling threshold); and models Zephon does not support (WORD,
CHAR, broken files) are refused naming what.

Invalid UTF-8: SentencePiece's C++ (given bytes) replaces each byte that does
not start a valid UTF-8 sequence by U+FFFD while normalizing, one byte at a
time; Zephon does the same; the reference is called with bytes.

usage: test_spm_parity.py HELPER REPO_ROOT   (HELPER: the spm_check binary)
Fails (never skips) when a reference or spm_train is missing.
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def venv_python(root):
    try:
        out = subprocess.run([os.path.join(root, "tools/tokref.sh")], cwd=root, check=True,
                             stdout=subprocess.PIPE, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        fail("tools/tokref.sh could not provide the references: %s" % e)
    d = out.strip().splitlines()[-1]
    py = os.path.join(d, "venv/bin/python")
    if not os.access(py, os.X_OK):
        fail("no reference Python at " + py)
    return py


# ---------------------------------------------------------------- text

SCRIPTS = [
    (0x4E00, 0x9FFF), (0x3041, 0x3096), (0x30A1, 0x30FA), (0xAC00, 0xD7A3), (0x0600, 0x06FF),
    (0x0900, 0x097F), (0x0400, 0x04FF), (0x0370, 0x03FF), (0x0590, 0x05FF), (0x0E00, 0x0E7F),
]
NFKC = ("\uff21\uff42\uff43\uff11\uff12\uff01\u3000\u00a0\ufb01\ufb02\u2460\u2473\u337b\u00bd"
        "\u2122\u2160\u2167\u00b2\u2075\ufdfa\u200b\u200c\u200d\u00ad\u2028\u3371\u1e9b\u0323"
        "\u212b\u2126\uff76\uff9e\u00c5\u0041\u030a\u1100\u1161\u11a8")
EMOJI = ["\U0001F600", "\U0001F469\u200d\U0001F4BB", "\U0001F44D\U0001F3FD",
         "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466", "\U0001F1EF\U0001F1F5",
         "\u2764\ufe0f", "\U0001F3F3\ufe0f\u200d\U0001F308"]
SPECIAL = ["<s>", "</s>", "<unk>", "<pad>", "<0x41>", "<0x0A>", "\u2581", "\u2581\u2581",
           "<|endoftext|>", "<mask>", "[CTRL]", "<sep>"]
WORDS = ("the of and to in is was for on that with as by at from this be it are which an or "
         "data loader token tokenizer pipeline batch shard epoch rank model train test "
         "it's don't WE'RE You'Ll o'clock naïve café résumé Zürich São Paulo").split()
INVALID = [b"\xff", b"\xfe", b"\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf",
           b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"\xbf\xbf"]


def rand_piece(r):
    k = r.random()
    if k < 0.25:
        w = r.choice(WORDS)
        return w.upper() if r.random() < 0.1 else w
    if k < 0.35:
        return " " * r.randint(1, 12) if r.random() < 0.7 else r.choice(["\t", "\t\t", "\n", "\r\n", "\n\n", " \t ", "\u3000"])
    if k < 0.45:
        return "".join(r.choice("0123456789") for _ in range(r.randint(1, 30)))
    if k < 0.55:
        lo, hi = r.choice(SCRIPTS)
        return "".join(chr(r.randint(lo, hi)) for _ in range(r.randint(1, 8)))
    if k < 0.62:
        return r.choice(NFKC) * r.randint(1, 3)
    if k < 0.68:
        return r.choice(EMOJI)
    if k < 0.74:
        return r.choice(SPECIAL)
    if k < 0.80:
        return "".join(chr(r.randint(0x300, 0x36F)) for _ in range(r.randint(1, 3)))
    if k < 0.90:
        return r.choice(".,;:!?-()[]{}\"'/\\@#$%^&*+=<>|~`_")
    if k < 0.95:
        return chr(r.randint(0x20, 0x7E))
    return chr(r.randint(0xA0, 0x2FFF))


def rand_string(r):
    parts = []
    for _ in range(r.randint(0, 14)):
        if r.random() < 0.04:
            parts.append(r.choice(INVALID))
        else:
            parts.append(rand_piece(r).encode("utf-8", "surrogatepass"))
    if r.random() < 0.3:
        parts.insert(0, b" " * r.randint(1, 3))
    return b"".join(parts)


def corpus(root):
    texts = []
    with open(os.path.join(root, "tests/data/tokenizer/corpus.jsonl"), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                texts.append(json.loads(line)["text"].encode("utf-8", "surrogatepass"))
    return texts


def own_cases():
    c = [b"", b" ", b"   ", b"\t", b"\n", b"a", b".", b"\xff", b" \xff ", b"a\xffb",
         b"\xe2\x96\x81", b"\xe2\x96\x81\xe2\x96\x81a", b"  leading and trailing  ",
         b"multiple     spaces\t\ttabs\r\nwindows\r\n\r\nline ends",
         "<s> </s> <unk> <pad> <0x41> [CTRL] <sep> <mask> text <s>inside</s>".encode(),
         "ＡＢＣ　１２３ ﬁnance ① ㍻ ½ ™ Ⅷ x² ﷺ".encode(),
         "e\u0301 \u00e9 A\u030a \u212b \u1100\u1161\u11a8".encode(),
         ("x" * 20000).encode(), ("word " * 3000).encode(), ("1234567890" * 500).encode(),
         ("\u4e2d\u6587" * 2000).encode(), (" " * 5000 + "a" + " " * 5000).encode(),
         b"\xed\xa0\x80\xed\xbf\xbf surrogates", b"\xc0\xaf overlong", b"\xf4\x90\x80\x80 big",
         b"truncated \xe2\x82", b"nul \x00 byte \x00\x00", b"\xef\xbf\xbd literal FFFD"]
    return c


def long_documents(root, r):
    """Documents long enough that Unigram path scores pass SentencePiece's
    rescaling threshold (100000) several times: word-heavy prose (segments
    seen again and again with other path scores: the segment cache's margin
    test), corpus lines and random strings; 24 documents of 20 KB to 400 KB."""
    lines = corpus(root)
    docs = []
    for i in range(24):
        target = r.choice([20_000, 60_000, 150_000, 400_000])
        parts, n = [], 0
        while n < target:
            k = r.random()
            if k < 0.7:
                p = " ".join(r.choice(WORDS) for _ in range(r.randint(5, 40))).encode() + b". "
            elif k < 0.85:
                p = r.choice(lines) + b" "
            else:
                p = rand_string(r) + b" "
            parts.append(p)
            n += len(p)
        docs.append(b"".join(parts))
    return docs


def training_text(root, r):
    lines = [t.decode("utf-8", "replace") for t in corpus(root)]
    out = []
    for _ in range(12):
        for t in lines:
            out.extend(l for l in t.split("\n") if l.strip())
    for _ in range(2000):
        s = rand_string(r).decode("utf-8", "replace").replace("\r", " ").replace("\n", " ")
        if s.strip():
            out.append(s)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- models

MODELS = [
    # name, spm_train options
    ("unigram", ["--model_type=unigram", "--vocab_size=3000"]),
    ("unigram_bytes_digits", ["--model_type=unigram", "--vocab_size=4000", "--byte_fallback=true",
                              "--split_digits=true", "--user_defined_symbols=<sep>,[CTRL],\u2581\u2581x",
                              "--control_symbols=<mask>"]),
    ("bpe", ["--model_type=bpe", "--vocab_size=3000"]),
    ("bpe_bytes_digits", ["--model_type=bpe", "--vocab_size=4000", "--byte_fallback=true",
                          "--split_digits=true", "--user_defined_symbols=<sep>,[CTRL]",
                          "--control_symbols=<mask>"]),
    ("unigram_raw", ["--model_type=unigram", "--vocab_size=2000", "--remove_extra_whitespaces=false",
                     "--add_dummy_prefix=false", "--normalization_rule_name=identity",
                     "--allow_whitespace_only_pieces=true"]),
    ("bpe_suffix_nfkccf", ["--model_type=bpe", "--vocab_size=2000", "--treat_whitespace_as_suffix=true",
                           "--normalization_rule_name=nfkc_cf", "--byte_fallback=true"]),
    ("unigram_nosplit", ["--model_type=unigram", "--vocab_size=1500",
                          "--split_by_whitespace=false", "--max_sentencepiece_length=8"]),
]


def train(tmp, text_path, name, opts):
    cmd = ["spm_train", "--input=" + text_path, "--model_prefix=" + os.path.join(tmp, name),
           "--minloglevel=2", "--num_threads=2", "--seed_sentencepiece_size=100000",
           "--character_coverage=0.98", "--input_sentence_size=0", "--hard_vocab_limit=false"] + opts
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        fail("spm_train %s failed:\n%s" % (name, p.stdout[-2000:]))
    return os.path.join(tmp, name + ".model")


REF = r'''
import sys, json, struct
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
data = open(sys.argv[2], "rb").read()
out = open(sys.argv[3], "w")
p = 0
while p + 4 <= len(data):
    (n,) = struct.unpack_from("<I", data, p)
    s = data[p + 4:p + 4 + n]
    p += 4 + n
    out.write(" ".join(map(str, sp.encode(s))) + "\n")
'''


def write_strings(path, strings):
    with open(path, "wb") as f:
        for s in strings:
            f.write(struct.pack("<I", len(s)))
            f.write(s)


def main():
    if len(sys.argv) != 3:
        fail("usage: test_spm_parity.py HELPER REPO_ROOT")
    helper, root = sys.argv[1], sys.argv[2]
    py = venv_python(root)
    if not shutil.which("spm_train"):
        fail("spm_train is missing (Debian package sentencepiece; tools/deps.sh installs it)")
    r = random.Random(20240521)
    tmp = tempfile.mkdtemp(prefix="zp_spm_")
    try:
        text_path = os.path.join(tmp, "train.txt")
        with open(text_path, "w", encoding="utf-8") as f:
            f.write(training_text(root, r))
        strings = corpus(root) + own_cases()
        rs = random.Random(1234)
        strings += [rand_string(rs) for _ in range(5000)]
        strings += long_documents(root, random.Random(77))
        in_path = os.path.join(tmp, "strings.bin")
        write_strings(in_path, strings)
        ref_py = os.path.join(tmp, "ref.py")
        with open(ref_py, "w") as f:
            f.write(REF)
        total = 0
        for name, opts in MODELS:
            t0 = time.time()
            model = train(tmp, text_path, name, opts)
            ours = os.path.join(tmp, name + ".ours")
            ref = os.path.join(tmp, name + ".ref")
            p = subprocess.run([helper, model, in_path, ours], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                fail("%s: spm_check exited %d:\n%s" % (name, p.returncode, p.stdout[-3000:]))
            subprocess.run([py, ref_py, model, in_path, ref], check=True)
            a = open(ours).read().split("\n")
            b = open(ref).read().split("\n")
            if len(a) != len(b):
                fail("%s: %d lines of ids, the reference %d" % (name, len(a), len(b)))
            bad = [i for i in range(len(strings)) if a[i] != b[i]]
            if bad:
                for i in bad[:5]:
                    print("%s: string %d %r\n  zephon:    %s\n  reference: %s"
                          % (name, i, strings[i][:200], a[i][:400], b[i][:400]))
                fail("%s: %d of %d strings differ from SentencePiece" % (name, len(bad), len(strings)))
            total += len(strings)
            print("%s: %d strings identical to SentencePiece (%.1f s)" % (name, len(strings), time.time() - t0), flush=True)

        # refused: WORD and CHAR models, broken files
        for mt in ("word", "char"):
            model = train(tmp, text_path, mt, ["--model_type=" + mt, "--vocab_size=1000",
                                               "--use_all_vocab=true", "--hard_vocab_limit=false"])
            p = subprocess.run([helper, model], stdout=subprocess.PIPE, text=True)
            if p.returncode != 1 or mt.upper() not in p.stdout or "not supported" not in p.stdout:
                fail("a %s model was not refused naming its type: %r" % (mt, p.stdout))
            print("refused:", p.stdout.strip())
        good = open(os.path.join(tmp, "unigram.model"), "rb").read()
        for label, blob in (("truncated", good[:len(good) // 2]), ("garbage", b"\xff" * 100),
                            ("empty", b"")):
            path = os.path.join(tmp, label + ".model")
            with open(path, "wb") as f:
                f.write(blob)
            p = subprocess.run([helper, path], stdout=subprocess.PIPE, text=True)
            if p.returncode != 1 or path not in p.stdout:
                fail("a %s .model file was not refused naming the file: %r" % (label, p.stdout))
            print("refused:", p.stdout.strip())
        print("OK: %d encodings identical to SentencePiece over %d models" % (total, len(MODELS)))
    finally:
        if os.environ.get("ZP_KEEP_TMP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
