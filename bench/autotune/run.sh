#!/usr/bin/env bash
# Automatic prefetch depth (issue 23 point 1, prefetch_batches = auto)
# against fixed depths, in one run: on a corpus with a long tail of
# document lengths (log-normal, up to 2.1 MB: tokenizing one long document
# holds the packer back, then a burst of batches follows) and on the demo
# data, with a simulated training step (`zephon run --step-time`) set so
# that the pipeline needs LOADS (default "0.45 0.60 0.80") of it on
# average. For each load and setting (fixed 2, 8, 32, 64 and auto): the
# consumer's stall fraction, batches/s, and batches/s over the best fixed
# setting's. Prints a Markdown table.
#   bench/autotune/run.sh [ZEPHON] [DIR]
# ZEPHON: default build/zephon; DIR: the data (default a new folder under
# ${TMPDIR:-/tmp}, kept). THREADS (2), SECONDS_PER_RUN (6), LONG_DOCS
# (2500), DEMO_BYTES (60M), LOADS.
set -euo pipefail
cd "$(dirname "$0")/../.."
Z=$(realpath "${1:-build/zephon}")
D=${2:-$(mktemp -d "${TMPDIR:-/tmp}/zp-bench-autotune.XXXXXX")}
THREADS=${THREADS:-2}; SECS=${SECONDS_PER_RUN:-6}; LOADS=${LOADS:-"0.45 0.60 0.80"}
mkdir -p "$D"
[[ -f "$D/demo/manifest.json" ]] ||
  "$Z" gen --out "$D/demo" --shards 8 --bytes "${DEMO_BYTES:-60M}" --seed 1 >/dev/null
if [[ ! -f "$D/long/long-0.jsonl" ]]; then
  mkdir -p "$D/long"
  python3 - "$D/long" "${LONG_DOCS:-2500}" <<'PY'
import json, math, random, sys
out, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(23)
words = ("the of and to in is that for it as was with be by on not he this are or his from at "
         "which but have an they you were her she there one all we their can has been if more "
         "when will would who so no data model train token loss layer batch memory").split()
fs = [open(f"{out}/long-{k}.jsonl", "w") for k in range(4)]
for i in range(n):
    size = min(2_100_000, max(40, int(rng.lognormvariate(math.log(3000), 1.9))))
    parts, have = [], 0
    while have < size:
        w = rng.choice(words)
        parts.append(w)
        have += len(w) + 1
    fs[i % 4].write(json.dumps({"id": i, "text": " ".join(parts)}) + "\n")
for f in fs:
    f.close()
PY
fi

# one run: stall_fraction batches/s prefetch_now
one() { # DATA PREFETCH STEP MAX_BATCHES
  rm -f "$D/m.json"
  "$Z" run "$1" --tokenize "gpt2:$THREADS" --threads "$THREADS" --seq-len 2048 --microbatch 8 \
    --prefetch-batches "$2" --step-time "$3" --max-batches "$4" --epochs 0 --quiet --json \
    --metrics-out "$D/m.json" > "$D/run.json" 2>/dev/null
  python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
d = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{\"rank\"")][0]
print(m["stall_fraction"], d["batches"] / d["seconds"], m.get("prefetch", {}).get("batches", 0))' \
    "$D/m.json" "$D/run.json"
}

echo "| data | load | prefetch | stall | batches/s | vs best fixed | depth reached |"
echo "|---|---:|---|---:|---:|---:|---:|"
for data in long demo; do
  src="$D/$data"; [[ $data == demo ]] && src="$D/demo/manifest.json"
  # the pipeline's own rate: batches/s with no step (a deep queue)
  read -r _ rate _ < <(one "$src" 64 0 400)
  for load in $LOADS; do
    step=$(python3 -c "print(f'{$load and (1 / $rate / $load):.6f}')")
    nb=$(python3 -c "print(max(40, int($SECS / $step)))")
    res=()
    for pf in 2 8 32 64 auto; do res+=("$pf $(one "$src" "$pf" "$step" "$nb")"); done
    printf '%s\n' "${res[@]}" | python3 -c '
import sys
rows = [l.split() for l in sys.stdin if l.strip()]
best = max(float(r[2]) for r in rows if r[0] != "auto")
for pf, stall, bps, depth in rows:
    print(f"| {sys.argv[1]} | {float(sys.argv[2]):.0%} | {pf} | {100*float(stall):.2f}% | {float(bps):.2f} | {float(bps)/best:.3f} | {depth} |")' \
      "$data" "$load"
  done
done
echo
echo "($(nproc) CPUs, threads $THREADS, ~${SECS} s a run; step = the pipeline's time per batch / load; data in $D)"
