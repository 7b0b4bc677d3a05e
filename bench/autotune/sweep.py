"""The sweep of bench/autotune/run.sh (its header describes it):
sweep.py ZEPHON DIR."""
import itertools
import json
import os
import subprocess
import sys

Z, D = sys.argv[1], sys.argv[2]
THREADS = int(os.environ.get("THREADS", "2"))
SECS = float(os.environ.get("SECONDS_PER_RUN", "4"))
LOADS = [float(x) for x in os.environ.get("LOADS", "0.45 0.60 0.80").split()]
WORKLOADS = os.environ.get("WORKLOADS", "long demo h5").split()

DATA = {"long": f"{D}/long", "demo": f"{D}/demo/manifest.json", "h5": f"{D}/f.h5"}
TOKENS = ["--seq-len", "2048", "--microbatch", "8"]


def run(w, setting, step, batches):
    """(stall fraction, batches/s, {op: value chosen}) of one run."""
    args = [Z, "run", DATA[w], "--threads", str(THREADS), "--epochs", "0", "--quiet", "--json",
            "--no-coverage", "--metrics-out", f"{D}/m.json", "--step-time", f"{step:.6f}",
            "--max-batches", str(batches)]
    if w == "h5":
        args += ["--microbatch", "256"]
    else:
        args += TOKENS
    if setting == "auto":
        if w != "h5":
            args += ["--tokenize", "gpt2"]  # the CLI's default parallelism: auto
    else:
        fetch, tok, pf = setting
        args += ["--fetch-parallelism", str(fetch), "--prefetch-batches", str(pf)]
        if w != "h5":
            args += ["--tokenize", f"gpt2:{tok}"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    d = [json.loads(l) for l in out.splitlines() if l.startswith('{"rank"')][0]
    m = json.load(open(f"{D}/m.json"))["metrics"]
    chosen = {t["op"]: t["value"] for t in m["tuning"]}
    return m["stall_fraction"], d["batches"] / d["seconds"], chosen


def fixed_settings(w):
    toks = [0] if w == "h5" else [1, 2]
    return list(itertools.product([1, 2], toks, [2, 8]))


def name(s):
    if s == "auto":
        return "auto"
    f, t, p = s
    return f"fetch {f}" + (f", tok {t}" if t else "") + f", prefetch {p}"


ROUNDS = int(os.environ.get("ROUNDS", "3"))


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


print("| data | load | best fixed setting (sweep) | its stall | its batches/s | auto stall | "
      "auto batches/s | auto / best | auto chose | goal |")
print("|---|---:|---|---:|---:|---:|---:|---:|---|---|")
for w in WORKLOADS:
    # the pipeline's own rate: its fastest fixed setting, no step
    rate = max(run(w, s, 0, 300 if w != "h5" else 2000)[1]
               for s in fixed_settings(w) if s[2] == 8)
    loads = LOADS + ([0] if w == "h5" else [])
    for load in loads:
        step = 1 / rate / load if load else 0.0
        nb = max(40, int(SECS / step)) if step else int(SECS * rate)
        # the sweep: one run of each fixed setting picks the best
        fixed = {s: run(w, s, step, nb) for s in fixed_settings(w)}
        best = max(fixed, key=lambda s: fixed[s][1])
        # then the best and auto alternated ROUNDS times: medians
        b, a = [], []
        for _ in range(ROUNDS):
            b.append(run(w, best, step, nb))
            a.append(run(w, "auto", step, nb))
        bstall, bbps = median([r[0] for r in b]), median([r[1] for r in b])
        astall, abps = median([r[0] for r in a]), median([r[1] for r in a])
        chosen = a[-1][2]
        reach = bstall <= 0.01  # the hand-tuned setting holds the stall at 1%
        ok = abps / bbps >= 0.95 and (not reach or astall <= 0.01)
        ch = ", ".join(f"{k} {v}" for k, v in chosen.items())
        print(f"| {w} | {f'{load:.0%}' if load else 'max'} | {name(best)} | {100 * bstall:.2f}% "
              f"| {bbps:.1f} | {100 * astall:.2f}% | {abps:.1f} | {abps / bbps:.3f} | {ch} | "
              f"{'yes' if ok else 'NO'} |", flush=True)
print()
print(f"({os.cpu_count()} CPUs, threads {THREADS}, ~{SECS:g} s a run, medians of {ROUNDS} "
      f"alternated runs of auto and the sweep's best; step = the pipeline's time per batch / "
      f"load; data in {D})")
