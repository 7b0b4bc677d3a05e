#!/usr/bin/env bash
# The Python package's benchmarks, one command (figures and ratios measured
# in this run):
#   bench/python/run.sh [MEGABYTES=20]
#  1. overhead: the Python loop (batch objects, zero-copy tokens arrays)
#     against the C consumer (`zephon run`), same pipeline, the demo's batch
#     size (tokenize gpt2, seq_len 2048, microbatch 8), 5 alternated runs;
#  2. end to end: Zephon from Python against a PyTorch DataLoader with the
#     pure-Python GPT-2 BPE (pybpe.py, checked exact first), its worker and
#     prefetch configurations swept, on the same 2 cores and the same data:
#     `zephon gen` text (small vocabulary: BPE caches hit almost always) and
#     bench/tokenizer's mixed corpus (English-like prose with a long tail,
#     code, multilingual text);
#  3. runners: a Python map_transform (the seed's clean_text, and a heavier
#     character-level normalizer) under the thread and the process runner,
#     against the pipeline without it.
# Needs what tools/deps.sh installs (python3-dev, numpy, torch, regex, node).
set -euo pipefail
cd "$(dirname "$0")/../.."
MB=${1:-20}
PY=/usr/bin/python3
B=build/bench-python
D=bench-data/python
mkdir -p "$B" "$D"

echo "== build (Release) and the Python package against it"
# the package as the build tree makes it for ctest (tests/python.cmake: the
# same extensions as pip builds), over this Release libzephon
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=ON \
  -DPython3_EXECUTABLE=$PY >/dev/null
cmake --build "$B" -j"$(nproc)" --target zephon zephon_mpi zephon_cli zephon_python >/dev/null
export PYTHONPATH=$PWD/$B/python/lib
Z=$PWD/$B/zephon

echo "== data (${MB} MB each)"
if [[ ! -f $D/gen/manifest.json ]]; then
  "$Z" gen --out "$D/gen" --format jsonl --shards 4 --bytes "${MB}M" --seed 1 >/dev/null
fi
if [[ ! -f $D/mixed/manifest.json ]]; then
  mkdir -p "$D/mixed"
  node bench/tokenizer/gen_text.mjs "$D/mixed/all.jsonl" "$MB" >/dev/null
  split -n l/4 -d -a 1 --additional-suffix=.jsonl "$D/mixed/all.jsonl" "$D/mixed/shard-"
  rm "$D/mixed/all.jsonl"
  "$Z" index -o "$D/mixed/manifest.json" "$D/mixed"/shard-*.jsonl >/dev/null
fi
echo "   gen:   $(du -sh "$D/gen" | cut -f1), mixed: $(du -sh "$D/mixed" | cut -f1)"

echo "== pybpe is exact (against zephon tokenize)"
$PY bench/python/check_pybpe.py "$Z" "$B/pybpe-check" | tail -1

echo "== 1. Python loop vs the C consumer"
$PY bench/python/bench_python.py overhead --data "$D/gen/manifest.json" --zephon "$Z" --runs 5 \
  | tee "$B/overhead.json"

echo "== 2. end to end vs PyTorch DataLoader + pure-Python BPE"
for set in gen mixed; do
  $PY bench/python/bench_python.py e2e --data "$D/$set/manifest.json" --runs 3 | tee "$B/e2e-$set.json"
  $PY bench/python/torch_baseline.py --shards "$D/$set"/shard-*.jsonl --microbatch 8 --seq-len 2048 \
      --sweep --repeat 2 --max-seconds 20 --sweep-workers 0,1,2,3 --sweep-prefetch 2,8 \
      > "$B/torch-$set.json"
  grep '"summary"' "$B/torch-$set.json" || true
  $PY - "$B/e2e-$set.json" "$B/torch-$set.json" "$set" <<'EOF'
import json, sys
z = json.loads(open(sys.argv[1]).read().splitlines()[-1])
rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
summ = [r for r in rows if r.get("summary")]
top = max(summ, key=lambda r: r.get("median_samples_per_s", 0))
best_any = max(r.get("best_samples_per_s", 0) for r in summ)
print(json.dumps({"bench": "e2e_ratio", "data": sys.argv[3],
                  "zephon_samples_per_s": z["samples_per_s"],
                  "dataloader_best_config": {k: top.get(k) for k in ("workers", "prefetch_factor")},
                  "dataloader_median_samples_per_s": top.get("median_samples_per_s"),
                  "dataloader_best_run_samples_per_s": best_any,
                  "ratio_vs_best_config_median": round(z["samples_per_s"] / top["median_samples_per_s"], 2),
                  "ratio_vs_best_run": round(z["samples_per_s"] / best_any, 2)}))
EOF
done

echo "== 3. Python map_transform: thread runner vs process runner"
$PY bench/python/bench_python.py runners --data "$D/gen/manifest.json" --runs 3
