#!/usr/bin/env bash
# bench/scaling/run.sh BUNDLE - thread scaling of the tokenizer, the whole
# pipeline and the `zephon tokenize` / `zephon preprocess` commands, each
# against the floor (bench/floor: the same threads only reading,
# decompressing, parsing and tokenizing) at the same thread count (issue 23,
# point 9: pipeline/floor >= 0.92 at every count, the pipeline at 16 threads
# >= 0.85 of linear, also when a rank has fewer shards than threads).
#
# BUNDLE is what bench/scaling/pack.sh made (binaries and their libraries),
# so this runs on a machine without the project's dependencies. It needs
# bash, awk and coreutils. One command, about 6 minutes on 16 cores:
#
#   THREADS="1 2 4 8 16" MB=320 ROUNDS=3 bash bench/scaling/run.sh .scaling
#
# Data (generated here, `zephon gen`: English-like text, GPT-2 tokenizer;
# in WORK, default /tmp/zp-scaling, removed at the end):
#   seek16   MB of JSONL in 16 seekable .jsonl.zst shards, hashed manifest
#   single6  the same size in 6 single-frame .jsonl.zst shards (fewer shards
#            than threads; each shard's stream decoded by one task at a time)
#   one      one plain .jsonl file, MB in all, for the commands
# bench_e2e --scaling prints, per thread count, each rate's share of linear
# (its speed-up over the first count / the thread ratio) and pipeline/floor
# (median of the rounds' own ratios). The commands and the floor's one
# round on the same file are timed whole (tokenizer load included).
set -uo pipefail
usage() { echo "usage: [THREADS=\"1 2 4 8 16\"] [MB=320] [ROUNDS=3] bash bench/scaling/run.sh BUNDLE" >&2; exit 2; }
[ $# -eq 1 ] || usage
bundle=$(cd "$1" 2>/dev/null && pwd) && [ -x "$bundle/bin/zephon" ] ||
    { echo "run.sh: '$1' is not a bundle of bench/scaling/pack.sh (no bin/zephon)" >&2; exit 2; }
threads=${THREADS:-1 2 4 8 16}
mb=${MB:-320}
rounds=${ROUNDS:-3}
int_in() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
for t in $threads; do
    int_in "$t" 1 1024 || { echo "run.sh: THREADS: '$t' is not a thread count (1-1024)" >&2; exit 2; }
done
[ -n "$threads" ] || { echo "run.sh: THREADS is empty" >&2; exit 2; }
int_in "$mb" 1 100000 || { echo "run.sh: MB: '$mb' is not a size in MB (1-100000)" >&2; exit 2; }
int_in "$rounds" 1 64 || { echo "run.sh: ROUNDS: '$rounds' is not 1-64" >&2; exit 2; }
work=${WORK:-/tmp/zp-scaling}
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
Z=$bundle/bin/zephon
missing=$(ldd "$bundle"/bin/* 2>&1 | grep "not found" | sort -u)
if [ -n "$missing" ]; then
    echo "run.sh: libraries missing from the bundle:" >&2
    echo "$missing" >&2
    exit 1
fi
echo "== commit $(cat "$bundle/commit" 2>/dev/null), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "== threads: $threads; $mb MB of JSONL; $rounds rounds"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
gen() { # name, options...
    local name=$1
    shift
    "$Z" gen --out "$work/$name" --bytes "${mb}M" --hash "$@" >/dev/null ||
        { echo "run.sh: zephon gen $name failed" >&2; exit 1; }
}
t0=$(date +%s)
gen seek16 --shards 16
gen single6 --shards 6 --single-frame
"$Z" gen --out "$work/one" --shards 1 --bytes "${mb}M" --format jsonl >/dev/null ||
    { echo "run.sh: zephon gen one failed" >&2; exit 1; }
echo "== data generated in $(( $(date +%s) - t0 )) s"
list=$(echo $threads | tr ' ' ,)
for d in seek16 single6; do
    echo "== the pipeline, $d ($(ls "$work/$d" | grep -c zst) shards)"
    "$bundle/bin/bench_e2e" "$work/$d/manifest.json" "$rounds" --scaling "$list" > "$work/e2e.out" ||
        { cat "$work/e2e.out"; echo "run.sh: bench_e2e failed on $d" >&2; exit 1; }
    grep -E "^(dataset|scaling)" "$work/e2e.out"
done

echo "== the commands, one $mb MB .jsonl (whole commands; MB/s of text)"
file="$work/one/shard-00000.jsonl"
now() { date +%s.%N; }
base_f= base_t= base_p= first=
for t in $threads; do
    z=$(now)
    fl=$("$bundle/bin/bench_floor" --threads "$t" --rounds 1 --no-hash "$file" | grep '^floor:') ||
        { echo "run.sh: bench_floor failed" >&2; exit 1; }
    text_mb=$(echo "$fl" | sed -n 's/.*, \([0-9.]*\) MB of text.*/\1/p')
    a=$(now); "$Z" tokenize --threads "$t" "$file" > "$work/ids.txt" || exit 1; b=$(now)
    rm -f "$work/ids.txt"
    rm -rf "$work/pp"
    "$Z" preprocess --quiet --no-progress --out "$work/pp" --threads "$t" "$file" >/dev/null || exit 1
    c=$(now)
    rm -rf "$work/pp"
    read -r f tk pp < <(awk -v m="$text_mb" -v z="$z" -v a="$a" -v b="$b" -v c="$c" \
        'BEGIN { printf "%.1f %.1f %.1f", m / (a - z), m / (b - a), m / (c - b) }')
    [ -z "$first" ] && { first=$t; base_f=$f; base_t=$tk; base_p=$pp; }
    awk -v t="$t" -v t1="$first" -v f="$f" -v tk="$tk" -v pp="$pp" -v bf="$base_f" -v bt="$base_t" \
        -v bp="$base_p" 'BEGIN {
        k = t / t1
        printf "commands %2d threads: floor %7.1f MB/s (%.2f of linear) | tokenize %7.1f MB/s (%.2f), /floor %.3f | preprocess %7.1f MB/s (%.2f), /floor %.3f\n",
            t, f, f / bf / k, tk, tk / bt / k, tk / f, pp, pp / bp / k, pp / f }'
done
echo "== done in $(( $(date +%s) - t0 )) s"
