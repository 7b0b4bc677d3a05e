#!/usr/bin/env bash
# Best-fit packing against concat packing (issue 22 item 2), in one run: on
# the demo data (zephon gen: English-like documents of 200 B - 20 KB) and on
# a corpus with a long-tailed (log-normal) length distribution, `zephon run
# --tokenize gpt2 --seq-len 2048 --microbatch 8` once per packing over one
# epoch; for each: the padding fraction (padding / row tokens), the fraction
# of documents cut (split over rows), rows used, samples/s, real tokens/s
# and the packer's busy time (median of RUNS runs). Prints a Markdown table.
# Then attention-cost balance (issue 22 item 3, `--balance K`) on both data
# sets: the costliest microbatch's attention cost (sum of squared document
# lengths) over the mean of its window of K, before and after balancing,
# measured in one run, and samples/s with and without it (BALANCE, default
# "4 8 32"; concat and bestfit:256 packing). A second table.
#   bench/packing/run.sh [ZEPHON] [DIR]
# ZEPHON: default build/zephon; DIR: where the data go (default a new
# folder under ${TMPDIR:-/tmp}, kept). THREADS (default 2), RUNS (3),
# DEMO_BYTES (40M), LONG_DOCS (6000), WINDOWS ("64 256 1024"), BALANCE.
set -euo pipefail
cd "$(dirname "$0")/../.."
Z=$(realpath "${1:-build/zephon}")
D=${2:-$(mktemp -d "${TMPDIR:-/tmp}/zp-bench-packing.XXXXXX")}
THREADS=${THREADS:-2}; RUNS=${RUNS:-3}; WINDOWS=${WINDOWS:-"64 256 1024"}
BALANCE=${BALANCE:-"4 8 32"}
mkdir -p "$D"
rm -f "$D/demo.res" "$D/long.res" "$D/bal.res"
[[ -f "$D/demo/manifest.json" ]] ||
  "$Z" gen --out "$D/demo" --shards 8 --bytes "${DEMO_BYTES:-40M}" --seed 1 >/dev/null
if [[ ! -f "$D/long/long-0.jsonl" ]]; then
  mkdir -p "$D/long"
  # log-normal word counts: median 300 words (~400 tokens), sigma 1.2: most
  # documents short, a long tail past several rows (capped at 40k words)
  python3 - "$D/long" "${LONG_DOCS:-6000}" <<'PY'
import json, math, random, sys
out, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(22)
words = ("the of and to in is that for it as was with be by on not he this are or his from at "
         "which but have an they you were her she there one all we their can has been if more "
         "when will would who so no data model train token loss layer batch memory").split()
shards = 4
fs = [open(f"{out}/long-{k}.jsonl", "w") for k in range(shards)]
for i in range(n):
    w = min(40000, max(1, int(rng.lognormvariate(math.log(300), 1.2))))
    text = " ".join(rng.choice(words) for _ in range(w))
    fs[i % shards].write(json.dumps({"id": i, "text": text}) + "\n")
for f in fs:
    f.close()
PY
fi

# one run: prints padding_fraction cut_fraction batches samples samples/s
# tokens/s and the batch stage's busy seconds (the packer's CPU time)
one() { # DATA PACK
  rm -f "$D/m.json"
  "$Z" run "$1" --tokenize "gpt2:$THREADS" --threads "$THREADS" --seq-len 2048 --microbatch 8 \
    --pack "$2" --epochs 1 --quiet --json --metrics-out "$D/m.json" > "$D/run.json" 2>/dev/null
  python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
busy = [o["busy_seconds"] for o in m["operators"] if o["name"] == "batch"][0]
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{\"rank\""):
        continue
    d = json.loads(line); p = d["packing"]
    print(p["padding_fraction"], p["cut_fraction"], d["batches"], d["samples"],
          d["samples_per_s"], d["tokens"] / d["seconds"], busy)' "$D/m.json" < "$D/run.json"
}

# the packings interleaved, RUNS rounds: drift in the machine's load falls
# on all of them alike
packs="concat $(for w in $WINDOWS; do echo "bestfit:$w"; done)"
for data in demo long; do
  src="$D/$data"; [[ $data == demo ]] && src="$D/demo/manifest.json"
  for _ in $(seq "$RUNS"); do
    for pack in $packs; do echo "$pack $(one "$src" "$pack")" >> "$D/$data.res"; done
  done
done
echo "| data | packing | padding | documents cut | batches | samples/s | real tokens/s | packer busy |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for data in demo long; do
  for pack in $packs; do
    grep "^$pack " "$D/$data.res" | cut -d' ' -f2- | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
pad, cut, nb, ns = rows[0][:4]
sps = statistics.median(r[4] for r in rows); tps = statistics.median(r[5] for r in rows)
busy = statistics.median(r[6] for r in rows)
print(f"| {sys.argv[1]} | {sys.argv[2]} | {100*pad:.2f}% | {100*cut:.2f}% | {int(nb)} | {sps:,.0f} | {tps:,.0f} | {1000*busy:.0f} ms |")' \
      "$data" "$pack"
  done
done
echo
echo "($(nproc) CPUs, threads $THREADS, median of $RUNS runs; data in $D)"

# attention-cost balance: one run gives the ratio before and after (the
# window's batches as packed, then as balanced); samples/s against the same
# packing without --balance, interleaved
bal() { # DATA PACK K (0: off) -> before after samples/s
  "$Z" run "$1" --tokenize "gpt2:$THREADS" --threads "$THREADS" --seq-len 2048 --microbatch 8 \
    --pack "$2" --balance "$3" --epochs 1 --quiet --json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("{\"rank\""):
        d = json.loads(line); b = d.get("balance", {})
        print(b.get("imbalance_before", 0), b.get("imbalance_after", 0), d["samples_per_s"])'
}
for data in demo long; do
  src="$D/$data"; [[ $data == demo ]] && src="$D/demo/manifest.json"
  for _ in $(seq "$RUNS"); do
    for pack in concat bestfit:256; do
      for k in 0 $BALANCE; do echo "$data $pack $k $(bal "$src" "$pack" "$k")" >> "$D/bal.res"; done
    done
  done
done
echo
echo "| data | packing | window K | max/mean before | max/mean after | samples/s | vs without |"
echo "|---|---|---:|---:|---:|---:|---:|"
python3 - "$D/bal.res" $BALANCE <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) == 6:
        runs[tuple(f[:3])].append(list(map(float, f[3:])))
for data in ("demo", "long"):
    for pack in ("concat", "bestfit:256"):
        base = statistics.median(r[2] for r in runs[(data, pack, "0")])
        for k in sys.argv[2:]:
            rs = runs[(data, pack, k)]
            sps = statistics.median(r[2] for r in rs)
            print(f"| {data} | {pack} | {k} | {rs[0][0]:.3f} | {rs[0][1]:.3f} | {sps:,.0f} | {sps / base:.2f} |")
PY
echo "(max/mean: the costliest microbatch of each window over the window's mean, cost-weighted over windows; 1 = even)"
