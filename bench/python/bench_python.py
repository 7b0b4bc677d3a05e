"""Benchmarks of the zephon Python package (bench/python/run.sh runs them).

  overhead  the Python loop against the C consumer (`zephon run`), same
            pipeline and batch size (the demo's: tokenize gpt2, seq_len 2048,
            microbatch 8), runs alternated; also the time Python spends per
            batch outside the pipeline's next()
  e2e       Zephon from Python, samples/s, to set against torch_baseline.py
  runners   a Python map_transform under the thread runner and the process
            runner, against the same pipeline without it

Each prints one JSON line per measurement.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import zephon
from zephon import Dataset, Pipeline, WorkSource


def pipeline(data, threads, tok_par, microbatch, seq_len, fn=None, runner="thread", par=2):
    p = Pipeline(WorkSource(Dataset(data), seed=1), threads=threads)
    if fn is not None:
        p.map_transform(fn, parallelism=par)
    return (p.tokenize(tokenizer_id="gpt2", field="text", parallelism=tok_par)
            .batch(microbatch_size=microbatch).pack("concat", seq_len).options(runner=runner))


def run_python(data, a, fn=None, runner="thread", par=2):
    """Wall seconds from the first next() to the end (as `zephon run`
    measures), samples, batches, and the seconds spent in the loop body
    (the batch's tokens array, releasing the batch): the Python cost of
    next() itself is in the wall time only."""
    p = pipeline(data, a.threads, a.tok_par, a.microbatch, a.seq_len, fn, runner, par)
    it = iter(p)  # the user's path: Pipeline.__next__, as a for loop takes it
    outside = 0.0
    n = 0
    t0 = time.perf_counter()
    while True:
        try:
            b = next(it)
        except StopIteration:
            break
        t2 = time.perf_counter()
        tok = b.tokens  # the array a training loop takes (zero-copy)
        tok = None  # noqa: F841
        b = None
        n += 1
        outside += time.perf_counter() - t2
    secs = time.perf_counter() - t0
    c = p.counts()
    stats = p._runner_stats()
    p.close()
    return {"seconds": secs, "samples": c["samples"], "batches": n, "python_outside_s": outside,
            "runners": stats}


def run_c(zbin, data, a):
    out = subprocess.run([zbin, "run", data, "--seed", "1", "--tokenize", f"gpt2:{a.tok_par}",
                          "--threads", str(a.threads), "--seq-len", str(a.seq_len),
                          "--microbatch", str(a.microbatch), "--json", "--quiet"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out.splitlines()[0])
    return {"seconds": j["seconds"], "samples": j["samples"], "batches": j["batches"]}


def overhead(a):
    c, py = [], []
    for _ in range(a.runs):
        c.append(run_c(a.zephon, a.data, a))
        py.append(run_python(a.data, a))
    cs = statistics.median(r["seconds"] for r in c)
    ps = statistics.median(r["seconds"] for r in py)
    assert c[0]["batches"] == py[0]["batches"] and c[0]["samples"] == py[0]["samples"]
    per_batch_us = statistics.median(r["python_outside_s"] / r["batches"] for r in py) * 1e6
    print(json.dumps({
        "bench": "overhead", "runs": a.runs, "batches": py[0]["batches"],
        "samples": py[0]["samples"], "c_seconds": [round(r["seconds"], 4) for r in c],
        "python_seconds": [round(r["seconds"], 4) for r in py],
        "c_median_s": round(cs, 4), "python_median_s": round(ps, 4),
        "python_over_c": round(ps / cs, 4),
        "python_outside_next_us_per_batch": round(per_batch_us, 2),
        "python_outside_next_fraction": round(per_batch_us * 1e-6 * py[0]["batches"] / ps, 5),
    }), flush=True)


def e2e(a):
    best = None
    for _ in range(a.runs):
        r = run_python(a.data, a)
        if best is None or r["seconds"] < best["seconds"]:
            best = r
    print(json.dumps({"bench": "e2e", "samples": best["samples"], "seconds": round(best["seconds"], 4),
                      "samples_per_s": round(best["samples"] / best["seconds"], 1),
                      "tokens_per_s": round(best["batches"] * a.microbatch * (a.seq_len + 1)
                                            / best["seconds"], 1)}), flush=True)


def clean_text(payload):
    """The seed's transform: strip the surrounding whitespace."""
    return {"text": payload["text"].strip()}


def normalize(payload):
    """A heavier pure-Python transform (about what a Python text cleaner
    costs): collapse whitespace runs and drop control characters, char by char."""
    out = []
    space = False
    for ch in payload["text"]:
        if ch.isspace():
            if not space:
                out.append(" ")
            space = True
        elif ch.isprintable():
            out.append(ch)
            space = False
    return {"text": "".join(out).strip()}


def runners(a):
    base = min((run_python(a.data, a) for _ in range(a.runs)), key=lambda r: r["seconds"])
    print(json.dumps({"bench": "runners", "transform": None, "runner": None,
                      "samples_per_s": round(base["samples"] / base["seconds"], 1),
                      "seconds": round(base["seconds"], 3)}), flush=True)
    for fn in (clean_text, normalize):
        for runner in ("thread", "process"):
            r = min((run_python(a.data, a, fn, runner, a.map_par) for _ in range(a.runs)),
                    key=lambda r: r["seconds"])
            st = r["runners"][0]
            print(json.dumps({
                "bench": "runners", "transform": fn.__name__, "runner": runner,
                "parallelism": a.map_par, "samples_per_s": round(r["samples"] / r["seconds"], 1),
                "seconds": round(r["seconds"], 3),
                "vs_no_transform": round(base["seconds"] / r["seconds"], 3),
                "transform_us_per_record": round(
                    1e6 * (st.get("busy_seconds") or st.get("worker_busy_seconds")) / st["records"], 2),
                "gil_wait_s": st.get("gil_wait_seconds"),
                "ipc_overhead_s": st.get("ipc_overhead_seconds"),
            }), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["overhead", "e2e", "runners"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--zephon", default="zephon")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tok-par", type=int, default=2)
    ap.add_argument("--map-par", type=int, default=2)
    ap.add_argument("--microbatch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    print(f"# zephon {zephon.version()}, python {sys.version.split()[0]}", file=sys.stderr)
    {"overhead": overhead, "e2e": e2e, "runners": runners}[a.what](a)


if __name__ == "__main__":
    main()
