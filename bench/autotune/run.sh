#!/usr/bin/env bash
# Autotune (issue 23 point 1; docs/pipeline.md, "Autotune") against a sweep
# of hand-tuned settings, in one run. Workloads:
#   long  JSONL documents of log-normal length up to 2.1 MB (one long
#         document holds the packer back, then a burst of batches follows),
#         tokenized (gpt2) and packed, seq_len 2048, microbatch 8;
#   demo  `zephon gen` text, the same pipeline;
#   h5    a fixed-shape HDF5 file read in record mode (256 rows a batch).
# A simulated training step (`zephon run --step-time`) is set so that the
# pipeline needs LOADS (default "0.45 0.60 0.80") of it on average (the
# pipeline's own time per batch measured first at its fastest fixed
# setting); h5 also without a step ("max": throughput alone). Settings:
# every combination of fetch-parallelism {1,2}, tokenize parallelism {1,2}
# (not for h5) and prefetch-batches {2,8}, and the defaults (all auto),
# each for about SECONDS_PER_RUN seconds of batches, from a fresh start;
# then the sweep's best and auto alternated ROUNDS (3) times: medians.
# Prints, per workload and load, the best fixed setting, auto's stall,
# batches/s and their ratio, what auto chose, and whether the goal holds
# (auto's stall <= 1% where the best fixed setting's is; batches/s >= 0.95
# of the best fixed).
#   bench/autotune/run.sh [ZEPHON] [DIR]
# ZEPHON: default build/zephon; DIR: the data (default a new folder under
# ${TMPDIR:-/tmp}, kept). THREADS (2), SECONDS_PER_RUN (4), ROUNDS (3), LONG_DOCS
# (2500), DEMO_BYTES (60M), H5_ROWS (400000), LOADS, WORKLOADS ("long demo h5").
set -euo pipefail
cd "$(dirname "$0")/../.."
Z=$(realpath "${1:-build/zephon}")
D=${2:-$(mktemp -d "${TMPDIR:-/tmp}/zp-bench-autotune.XXXXXX")}
mkdir -p "$D"
[[ -f "$D/demo/manifest.json" ]] ||
  "$Z" gen --out "$D/demo" --shards 8 --bytes "${DEMO_BYTES:-60M}" --seed 1 >/dev/null
[[ -f "$D/f.h5" ]] ||
  "$Z" gen --format h5 --out "$D/f.h5" --shards 1 --samples-per-shard "${H5_ROWS:-400000}" \
    --features 64 >/dev/null
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
exec python3 "$(dirname "$0")/sweep.py" "$Z" "$D"
