#!/usr/bin/env bash
# The automatic prefetch look-ahead (`--prefetch auto`, docs/pipeline.md
# "Autotune") against a sweep of hand-set look-aheads, on remote shards
# behind a proxy that adds LATENCY_MS (default 50) to every request, in one
# run (issue 23 point 1: "the prefetch look-ahead may be set to auto").
# The job: one rank reading a remote manifest of SHARDS (64) x SAMPLES (200)
# `zephon gen` shards (about 160 kB each) through the fault proxy of
# tests/net/servers.sh, tokenized (gpt2) and packed, THREADS (2) threads,
# a fresh disk cache each run (every shard downloaded). Settings: no
# prefetch, N:P in {64:2, 256:4, 1024:8, 4096:16}, and auto; each run
# once, then the sweep's best and auto alternated ROUNDS (3) times:
# medians of samples/s. Prints the table, the ratio auto / best fixed
# (goal >= 0.95) and the same job on the local files (the ceiling).
#   bench/prefetch/run.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
if [[ ! -x $B/zephon ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
  cmake --build "$B" -j2 --target zephon_cli >/dev/null
fi
Z=$(realpath "$B/zephon")
O=$(mktemp -d /tmp/zephon-bench-prefetch.XXXXXX)
NET=$O/net
cleanup() { bash tests/net/servers.sh stop "$NET" >/dev/null 2>&1 || true; rm -rf "$O"; }
trap cleanup EXIT
ZT_PROXY_DELAY_MS=${LATENCY_MS:-50} bash tests/net/servers.sh start "$NET" >/dev/null
PROXY=$(sed -n 's/^ZT_PROXY=//p' "$NET/env" | head -n1)
ROOT=$(sed -n 's/^ZT_ROOT=//p' "$NET/env" | head -n1)
SHARDS=${SHARDS:-64}; SAMPLES=${SAMPLES:-200}; ROUNDS=${ROUNDS:-3}; THREADS=${THREADS:-2}
"$Z" gen --out "$ROOT/pf" --shards "$SHARDS" --samples-per-shard "$SAMPLES" --seed 5 >/dev/null
chmod -R a+rX "$ROOT/pf"
JOB=(--quiet --json --threads "$THREADS" --tokenize gpt2 --seq-len 1023 --microbatch 8 --seed 3
     --connect-timeout 5 --retries 8)
n=0
rate() { # SPEC ARGS...: samples/s of one run, fresh cache
  local spec=$1; shift
  n=$((n + 1))
  "$Z" run "$spec" "${JOB[@]}" --cache-dir "$O/cache-$n" "$@" |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["samples_per_s"])'
  rm -rf "$O/cache-$n"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
URL=$PROXY/pf/manifest.json
declare -A sweep
names=(off 64:2 256:4 1024:8 4096:16)
for s in "${names[@]}"; do
  if [[ $s == off ]]; then sweep[$s]=$(rate "$URL"); else sweep[$s]=$(rate "$URL" --prefetch "$s"); fi
done
best=off
for s in "${names[@]}"; do
  python3 -c "import sys; sys.exit(0 if ${sweep[$s]} > ${sweep[$best]} else 1)" && best=$s
done
bargs=(); [[ $best == off ]] || bargs=(--prefetch "$best")
bv=(); av=()
for ((r = 0; r < ROUNDS; r++)); do
  bv+=("$(rate "$URL" "${bargs[@]}")")
  av+=("$(rate "$URL" --prefetch auto)")
done
bm=$(median "${bv[@]}"); am=$(median "${av[@]}")
local_rate=$(rate "$ROOT/pf/manifest.json")
echo "prefetch look-ahead: $SHARDS remote shards x $SAMPLES samples, ${LATENCY_MS:-50} ms a request, $THREADS threads"
echo "  sweep (one run each), samples/s:"
for s in "${names[@]}"; do printf '    %-10s %10.1f\n' "$s" "${sweep[$s]}"; done
printf '  best fixed (%s), median of %d: %.1f   [%s]\n' "$best" "$ROUNDS" "$bm" "${bv[*]}"
printf '  auto, median of %d:              %.1f   [%s]\n' "$ROUNDS" "$am" "${av[*]}"
printf '  local files (no latency):        %.1f\n' "$local_rate"
python3 - "$am" "$bm" "$local_rate" <<'PY'
import sys
a, b, l = map(float, sys.argv[1:])
r = a / b if b else 0.0
print(f"  auto / best fixed: {r:.3f} (goal >= 0.95: {'met' if r >= 0.95 else 'not met'}); "
      f"auto / local files: {a / l if l else 0:.3f}")
PY
