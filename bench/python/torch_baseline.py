#!/usr/bin/python3
"""The PyTorch DataLoader baseline of the Python benchmark (issue 12, point 7).

Reads the JSONL shards Zephon reads, tokenizes the "text" field with pybpe
(pure-Python GPT-2 BPE, bench/python/pybpe.py) and packs documents the way
Zephon's concat mode does, in a torch.utils.data.IterableDataset under a
DataLoader(batch_size=None): each worker builds whole batches.

    /usr/bin/python3 bench/python/torch_baseline.py --shards DIR/shard-*.jsonl \\
        --microbatch 8 --seq-len 2048 --workers 2 --prefetch-factor 4 --json
    /usr/bin/python3 bench/python/torch_baseline.py --shards DIR/shard-*.jsonl --sweep

Packing (Zephon's ZP_PACK_CONCAT): a worker's documents form one stream, each
document's ids followed by EOT (50256); rows are seq_len + 1 tokens and row
k+1 starts with the last token of row k, so each token is a target once. A
batch is `microbatch` consecutive rows: an int32 tensor [microbatch,
seq_len + 1]. The last batch of a worker's stream is padded with EOT (Zephon
pads its last batch too, with loss_mask 0).

Work split: with W workers, worker w reads shards w, w+W, ... (`--split
shard`), or every shard and parses only the records of line index = w mod W
(`--split line`; reading a line is cheap next to parsing and tokenizing it).
`auto` (default) splits shards when W divides the shard count, else lines,
so that no worker gets twice the work of another. Each worker packs its own
stream.

Counted:
- samples: documents whose first token lies in a delivered batch (Zephon's
  count: `n_samples` are the documents that start in a batch). A document
  whose first token is the carried-over first token of a batch counts in the
  batch before it, where that token is new.
- tokens: stream tokens (document ids + EOT) delivered, each once (the
  carried token is not counted twice, padding not at all); equal to Zephon's
  `tokens` count (EOT included) for a whole epoch.
- wall: from just before the DataLoader is created (workers started by it)
  to the arrival of the last batch; the encoder's vocabulary is loaded
  before (reported as setup_s; forked workers inherit it), and every worker
  starts with empty tokenizer caches. With --max-seconds S, iteration stops at
  the first batch that arrives after S seconds and the figures count what was
  delivered until then.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections import deque

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pybpe  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def open_lines(path):
    """Iterate the lines (bytes) of a .jsonl or .jsonl.zst file."""
    if not path.endswith(".zst"):
        with open(path, "rb", buffering=1 << 20) as f:
            yield from f
        return
    try:
        import zstandard
    except ImportError:
        zstandard = None
    if zstandard is not None:
        import io
        with open(path, "rb") as raw:
            with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as r:
                yield from io.BufferedReader(r, 1 << 20)
        return
    proc = subprocess.Popen(["zstd", "-dc", "--", path], stdout=subprocess.PIPE, bufsize=1 << 20)
    try:
        yield from proc.stdout
    finally:
        proc.stdout.close()
        if proc.wait() != 0 and proc.returncode > 0:
            raise RuntimeError("zstd -dc %s failed (%d)" % (path, proc.returncode))


class PackedJsonl(IterableDataset):
    """JSONL shards -> pybpe ids -> concat-packed int32 batches.

    Yields (tokens [microbatch, seq_len+1] int32 tensor, n_samples, n_tokens)."""

    def __init__(self, shards, microbatch, seq_len, split="auto", field="text", data_dir=None, epochs=1):
        self.shards = list(shards)
        self.microbatch = microbatch
        self.seq_len = seq_len
        self.split = split
        self.field = field
        self.epochs = epochs
        self.enc = pybpe.Encoder(data_dir or os.path.join(REPO, "data", "gpt2"))

    def split_mode(self, n_workers):
        if self.split != "auto":
            return self.split
        return "shard" if len(self.shards) % n_workers == 0 else "line"

    def _texts(self, wid, nw):
        mode = self.split_mode(nw)
        loads, field = json.loads, self.field
        for _ in range(self.epochs):
            if mode == "shard" or nw == 1:
                for path in self.shards[wid::nw]:
                    for line in open_lines(path):
                        if line.strip():
                            yield loads(line)[field]
            else:
                i = 0
                for path in self.shards:
                    for line in open_lines(path):
                        if not line.strip():
                            continue
                        if i % nw == wid:
                            yield loads(line)[field]
                        i += 1

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        enc = self.enc
        enc._cache.clear()                # every run starts cold, like a new pipeline
        if enc._segments is not None:
            enc._segments.clear()
        eot = enc.eot
        step = self.microbatch * self.seq_len      # new stream tokens per batch
        shape = (self.microbatch, self.seq_len + 1)
        buf = []            # stream tokens from absolute position `base` on
        base = 0
        starts = deque()    # absolute start positions of documents not yet counted
        extend = enc.encode_extend

        def batch(n_new, tokens):
            nonlocal base
            arr = np.array(tokens, dtype=np.int32)
            if arr.size < step + 1:
                arr = np.concatenate([arr, np.full(step + 1 - arr.size, eot, dtype=np.int32)])
            rows = np.lib.stride_tricks.as_strided(arr, shape=shape, strides=(self.seq_len * 4, 4))
            end = base + n_new
            n = 0
            while starts and starts[0] < end:
                starts.popleft()
                n += 1
            base = end
            return torch.from_numpy(np.ascontiguousarray(rows)), n, n_new

        for text in self._texts(wid, nw):
            starts.append(base + len(buf))
            extend(text, buf)
            buf.append(eot)
            while len(buf) > step:
                out = batch(step, buf[:step + 1])
                del buf[:step]
                yield out
        if buf:
            yield batch(len(buf), buf)


def measure(shards, microbatch, seq_len, workers, prefetch, max_seconds, split="auto", epochs=1, data_dir=None):
    t_setup = time.perf_counter()
    ds = PackedJsonl(shards, microbatch, seq_len, split=split, data_dir=data_dir, epochs=epochs)
    setup = time.perf_counter() - t_setup
    kw = {}
    if workers > 0:
        kw["prefetch_factor"] = prefetch
    c0 = os.times()
    t0 = time.perf_counter()
    loader = DataLoader(ds, batch_size=None, num_workers=workers, **kw)
    it = iter(loader)
    docs = tokens = batches = 0
    t_last = t0
    stopped = False
    checksum = 0
    for tensor, n_docs, n_tok in it:
        t_last = time.perf_counter()
        assert tensor.dtype == torch.int32 and tuple(tensor.shape) == (microbatch, seq_len + 1)
        checksum = (checksum + int(tensor[0, 0]) + int(tensor[-1, -1])) & 0xFFFFFFFF  # touch the batch
        docs += n_docs
        tokens += n_tok
        batches += 1
        if max_seconds and t_last - t0 >= max_seconds:
            stopped = True
            break
    wall = t_last - t0
    c1 = os.times()
    del it, loader        # shut the workers down (not timed)
    cpu_main = (c1.user - c0.user) + (c1.system - c0.system)
    return {
        "workers": workers, "prefetch_factor": prefetch if workers > 0 else None,
        "split": ds.split_mode(max(workers, 1)) if workers > 1 else "none",
        "microbatch": microbatch, "seq_len": seq_len, "shards": len(shards),
        "samples": docs, "tokens": tokens, "batches": batches, "wall_s": round(wall, 4),
        "samples_per_s": round(docs / wall, 1) if wall > 0 else None,
        "tokens_per_s": round(tokens / wall, 1) if wall > 0 else None,
        "batches_per_s": round(batches / wall, 3) if wall > 0 else None,
        "stopped_at_max_seconds": stopped, "setup_s": round(setup, 3),
        "cpu_s_main_process": round(cpu_main, 2), "checksum": checksum,
    }


def check_packing(shards, data_dir=None):
    """Checks the packing on `shards` with small rows (microbatch 3, seq_len 17):
    at 0 workers the batches are exactly the concatenated documents + EOT cut
    into overlapping rows, padded with EOT, and each batch counts the
    documents that start in it; at 2 and 3 workers every batch keeps the
    overlap and the totals (samples, tokens) are the same. Returns an error
    message or None."""
    mb, sl = 3, 17
    enc = pybpe.Encoder(data_dir or os.path.join(REPO, "data", "gpt2"))
    ref, starts = [], []
    for path in shards:
        for line in open_lines(path):
            if line.strip():
                starts.append(len(ref))
                ref += enc.encode(json.loads(line)["text"]) + [enc.eot]
    step = mb * sl
    for workers in (0, 2, 3):
        ds = PackedJsonl(shards, mb, sl, data_dir=data_dir)
        stream, counts, docs, tokens = [], [], 0, 0
        for t, n, k in DataLoader(ds, batch_size=None, num_workers=workers):
            a = t.numpy()
            if a.shape != (mb, sl + 1) or a.dtype != np.int32:
                return "workers %d: batch of shape %s, %s" % (workers, a.shape, a.dtype)
            if any(a[i][0] != a[i - 1][-1] for i in range(1, mb)):
                return "workers %d: a row does not start with the last token of the row before" % workers
            flat = a[0].tolist() + [x for r in a[1:] for x in r[1:].tolist()]
            stream += flat[:-1]
            counts.append(n)
            docs += n
            tokens += k
        if (docs, tokens) != (len(starts), len(ref)):
            return "workers %d: %d samples %d tokens, expected %d and %d" % (workers, docs, tokens, len(starts),
                                                                           len(ref))
        if workers == 0:
            if stream[:len(ref)] != ref or any(x != enc.eot for x in stream[len(ref):]):
                return "workers 0: the batches are not the packed stream"
            want = [sum(1 for x in starts if b * step <= x < (b + 1) * step) for b in range(len(counts))]
            if counts != want:
                return "workers 0: documents per batch %s, expected %s" % (counts[:10], want[:10])
    return None


def main():
    ap = argparse.ArgumentParser(description="PyTorch DataLoader + pure-Python GPT-2 BPE baseline")
    ap.add_argument("--shards", nargs="+", required=True, help=".jsonl or .jsonl.zst files")
    ap.add_argument("--check", action="store_true", help="check the packing on these (small) shards and exit")
    ap.add_argument("--microbatch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--prefetch-factor", type=int, default=2)
    ap.add_argument("--max-seconds", type=float, default=0, help="stop after this much wall time (0: whole data)")
    ap.add_argument("--split", choices=["auto", "shard", "line"], default="auto")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the shards")
    ap.add_argument("--data-dir", default=None, help="GPT-2 vocabulary (default: the repo's data/gpt2)")
    ap.add_argument("--cpus", default=None, help="pin to these CPUs first, e.g. 0,1 (workers inherit it)")
    ap.add_argument("--json", action="store_true", help="one JSON line per run")
    ap.add_argument("--sweep", action="store_true",
                    help="workers 0-4 x prefetch_factor 2,4,8; prints each and the best (median samples/s)")
    ap.add_argument("--repeat", type=int, default=3, help="--sweep: runs per configuration")
    ap.add_argument("--sweep-workers", default="0,1,2,3,4")
    ap.add_argument("--sweep-prefetch", default="2,4,8")
    args = ap.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    torch.set_num_threads(1)
    # DataLoader warns when workers > CPUs; the sweep tries that on purpose.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    common = dict(shards=args.shards, microbatch=args.microbatch, seq_len=args.seq_len,
                  max_seconds=args.max_seconds, split=args.split, epochs=args.epochs, data_dir=args.data_dir)
    env = {"cpus": sorted(os.sched_getaffinity(0)), "torch": torch.__version__, "python": sys.version.split()[0]}

    if args.check:
        err = check_packing(args.shards, args.data_dir)
        print("torch_baseline --check: " + (err or "OK: packing exact at 0 workers, totals equal at 2 and 3"))
        return 1 if err else 0

    if not args.sweep:
        r = measure(workers=args.workers, prefetch=args.prefetch_factor, **common)
        r.update(env)
        if args.json:
            print(json.dumps(r))
        else:
            print("workers %d prefetch %s: %d samples, %d tokens, %d batches in %.2f s: %.1f samples/s, "
                  "%.0f tokens/s, %.2f batches/s" % (r["workers"], r["prefetch_factor"], r["samples"],
                                                     r["tokens"], r["batches"], r["wall_s"], r["samples_per_s"],
                                                     r["tokens_per_s"], r["batches_per_s"]))
        return 0

    configs = []
    for w in (int(x) for x in args.sweep_workers.split(",")):
        for pf in ((2,) if w == 0 else tuple(int(x) for x in args.sweep_prefetch.split(","))):
            configs.append((w, pf))
    results = []
    for rep in range(args.repeat):        # interleaved, so that load changes hit every configuration
        for w, pf in configs:
            r = measure(workers=w, prefetch=pf, **common)
            r["repeat"] = rep
            results.append(r)
            print(json.dumps(r), flush=True)
    table = []
    for w, pf in configs:
        runs = [r for r in results if r["workers"] == w and r["prefetch_factor"] == (pf if w else None)]
        sps = [r["samples_per_s"] for r in runs]
        tps = [r["tokens_per_s"] for r in runs]
        table.append({"workers": w, "prefetch_factor": pf if w else None, "split": runs[0]["split"],
                      "median_samples_per_s": round(statistics.median(sps), 1),
                      "best_samples_per_s": max(sps), "median_tokens_per_s": round(statistics.median(tps), 1),
                      "median_batches_per_s": round(statistics.median(r["batches_per_s"] for r in runs), 3),
                      "samples": runs[0]["samples"], "tokens": runs[0]["tokens"], "runs": len(runs)})
    best = max(table, key=lambda t: t["median_samples_per_s"])
    for t in table:
        print(json.dumps(dict(t, summary=True)))
    print(json.dumps(dict(best, best=True, **env)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
