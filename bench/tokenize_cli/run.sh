#!/usr/bin/env bash
# bench/tokenize_cli/run.sh [BUILD_DIR] - `zephon tokenize` against the
# encoder alone, on the same text, in one run (docs/tokenizer.md).
#
#   BUILD_DIR   a CMake build folder of this repository (default: build/bench);
#               configured here (Release) when it does not exist yet.
#   MB=32       size of the generated text in megabytes (environment)
#   PASSES=3    passes per measurement; the best one counts (environment)
#   ZEPHON=...  measure this zephon binary instead of BUILD_DIR's (e.g. an
#               older build; one without --threads runs with its defaults)
#   IR=1        also count instructions with valgrind's callgrind (default
#               when valgrind is installed; IR=0 skips): on the first 4 MB of
#               the text, the share of `zephon tokenize`'s instructions spent
#               in zp_encode, with and without the vocabulary load. Counts
#               repeat exactly, so this ratio does not depend on the load of
#               the machine (it leaves out cache effects).
#
# The text is bench/tokenizer/gen_text.mjs's (deterministic, English-heavy,
# ~8% multilingual), written as JSONL and as JSONL.zst under BUILD_DIR. The
# encoder alone is bench_tokenizer (bench/tokenizer): every document already
# in memory, one encoder per thread, each thread on its own half. MB/s is
# 10^6 bytes of document text (the decoded "text" strings, as bench_tokenizer
# counts them) per second, for both. `zephon tokenize` writes its ids to a
# file under BUILD_DIR. Wall-clock and CPU-time figures are printed: on a
# shared machine the CPU-time ratio is the steadier one. The command's fixed
# start-up (loading the vocabulary, ~20-60 ms, measured on an empty input)
# is printed too, and the ratios are given with and without it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build/bench}
mb=${MB:-32}
passes=${PASSES:-3}

command -v node >/dev/null || { echo "run.sh: node is required (to generate the text)" >&2; exit 1; }
command -v zstd >/dev/null || { echo "run.sh: zstd is required" >&2; exit 1; }

if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "== configuring $build (Release)"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF \
        -DZEPHON_WITH_MPI=OFF >/dev/null
fi
echo "== building zephon and bench_tokenizer in $build"
cmake --build "$build" --target zephon_cli bench_tokenizer -j "$(nproc)" >/dev/null
bench="$build/bench_tokenizer"
zephon=${ZEPHON:-$build/zephon}
[ -x "$bench" ] && [ -x "$zephon" ] || { echo "run.sh: binaries not found in $build" >&2; exit 1; }

out="$build/tokenize_cli_bench"
mkdir -p "$out"
text="$out/text-${mb}MB.jsonl"
if [ ! -s "$text" ] || [ "$root/bench/tokenizer/gen_text.mjs" -nt "$text" ]; then
    node "$root/bench/tokenizer/gen_text.mjs" "$text" "$mb" > "$out/text-${mb}MB.txt"
    zstd -q -f -3 "$text" -o "$text.zst"
fi

echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
echo "== load average now: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine lowers every figure)"
echo "== $(cat "$out/text-${mb}MB.txt" 2>/dev/null || echo "text: $text")"

threads_opt() { # N -> the option, when the binary has it
    if "$zephon" tokenize --help 2>/dev/null | grep -q -- --threads; then echo "--threads=$1"; fi
}

# one run: prints "wall cpu" (seconds) of `zephon tokenize ARGS > ids`
time_cli() { # threads file
    local t opt
    opt=$(threads_opt "$1")
    TIMEFORMAT='%R %U %S'
    if ! t=$( { time "$zephon" tokenize $opt "$2" > "$out/ids-$1-$(basename "$2").txt" 2>/dev/null; } 2>&1 ); then
        echo "0 0"; return  # this binary cannot read it (e.g. zstd before it could)
    fi
    echo "$t" | awk '{ print $1, $2 + $3 }'
}
lo() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b < a) ? b : a }'; }
hi() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b > a) ? b : a }'; }

get() { printf '%s\n' "$1" | awk -v k="$2" '$1 == k { print $2 }'; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.1f", b / s / 1e6; else print "n/a" }'; }
# a figure from a failed run stays n/a
net() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > 0) ? a - b : 0 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }

echo "== measuring (best of $passes passes each; the passes interleave the encoder and the command,"
echo "   so that both see the same changes of load)"
: > "$out/empty.jsonl"
e1= e2= ec1= w1= c1= w2= c2= wz= cz= w0= c0=
for _ in $(seq "$passes"); do
    z=$("$bench" "$text" 1)
    e1=$(hi "$e1" "$(get "$z" mbps_1t)"); e2=$(hi "$e2" "$(get "$z" mbps_2t)")
    ec1=$(hi "$ec1" "$(get "$z" cpu_mbps_1t)")
    read -r w c < <(time_cli 1 "$text"); w1=$(lo "$w1" "$w"); c1=$(lo "$c1" "$c")
    read -r w c < <(time_cli 2 "$text"); w2=$(lo "$w2" "$w"); c2=$(lo "$c2" "$c")
    read -r w c < <(time_cli 2 "$text.zst"); wz=$(lo "$wz" "$w"); cz=$(lo "$cz" "$c")
    read -r w c < <(time_cli 1 "$out/empty.jsonl"); w0=$(lo "$w0" "$w"); c0=$(lo "$c0" "$c")
done
bytes=$(get "$z" bytes)
t1=$(mbps "$bytes" "$w1"); t2=$(mbps "$bytes" "$w2"); tz=$(mbps "$bytes" "$wz")
tc1=$(mbps "$bytes" "$c1"); tc2=$(mbps "$bytes" "$c2")
n1=$(mbps "$bytes" "$(net "$w1" "$w0")"); n2=$(mbps "$bytes" "$(net "$w2" "$w0")")
nc1=$(mbps "$bytes" "$(net "$c1" "$c0")"); nc2=$(mbps "$bytes" "$(net "$c2" "$c0")")
same=identical
cmp -s "$out/ids-1-$(basename "$text").txt" "$out/ids-2-$(basename "$text").txt" && cmp -s "$out/ids-1-$(basename "$text").txt" "$out/ids-2-$(basename "$text").zst.txt" || same=DIFFERENT

echo
echo "text: $bytes bytes of document text, $(get "$z" docs) documents, $(get "$z" tokens) tokens;"
echo "      input file $(stat -c %s "$text") bytes (jsonl), $(stat -c %s "$text.zst") bytes (jsonl.zst)"
echo "zephon: $zephon"
printf '%-44s %10s %14s\n' "MB/s (10^6 bytes of text per second)" "wall" "per CPU-second"
printf '%-44s %10s %14s\n' "encoder alone, 1 thread" "$e1" "$ec1"
printf '%-44s %10s %14s\n' "encoder alone, 2 threads" "$e2" ""
printf '%-44s %10s %14s\n' "zephon tokenize, 1 thread (jsonl)" "$t1" "$tc1"
printf '%-44s %10s %14s\n' "zephon tokenize, 2 threads (jsonl)" "$t2" "$tc2"
printf '%-44s %10s %14s\n' "zephon tokenize, 2 threads (jsonl.zst)" "$tz" "$(mbps "$bytes" "$cz")"
printf '%-44s %10s %14s\n' "  the same without start-up, 1 thread" "$n1" "$nc1"
printf '%-44s %10s %14s\n' "  the same without start-up, 2 threads" "$n2" "$nc2"
echo "start-up (an empty input): $(awk -v w="$w0" -v c="$c0" 'BEGIN { printf "%.0f ms wall, %.0f ms CPU", w * 1e3, c * 1e3 }')"
echo
echo "ratios (with start-up | without):"
echo "  tokenize / encoder, 1 thread:   $(ratio "$t1" "$e1") | $(ratio "$n1" "$e1") wall, $(ratio "$tc1" "$ec1") | $(ratio "$nc1" "$ec1") per CPU-second"
echo "  tokenize / encoder, 2 threads:  $(ratio "$t2" "$e2") | $(ratio "$n2" "$e2") wall, $(ratio "$tc2" "$ec1") | $(ratio "$nc2" "$ec1") per CPU-second (vs the encoder's 1-thread CPU figure)"
echo "  scaling 2 / 1 threads:          tokenize $(ratio "$t2" "$t1") | $(ratio "$n2" "$n1"), encoder $(ratio "$e2" "$e1") (2.00 is linear)"
echo "  outputs at 1 and 2 threads:     $same"

if [ "${IR:-1}" = 1 ] && command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null; then
    head -c 4000000 "$text" | sed '$d' > "$out/text-4MB.jsonl"
    valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" \
        "$zephon" tokenize $(threads_opt 1) "$out/text-4MB.jsonl" > /dev/null 2> "$out/callgrind.log"
    callgrind_annotate --inclusive=yes "$out/callgrind.out" > "$out/callgrind.txt" 2>/dev/null
    ir() { awk -v f="$1" '$0 ~ f { gsub(",", "", $1); print $1; exit }' "$out/callgrind.txt"; }
    total=$(ir "PROGRAM TOTALS"); enc=$(ir ":zp_encode "); load=$(ir ":zp_tokenizer_create ")
    echo
    echo "instructions (callgrind, 1 thread, the first 4 MB): total $total, zp_encode $enc, vocabulary load ${load:-0}"
    echo "  zp_encode's share: $(ratio "$enc" "$total") of all, $(ratio "$enc" "$(net "$total" "${load:-0}")") without the vocabulary load"
fi
