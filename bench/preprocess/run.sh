#!/usr/bin/env bash
# bench/preprocess/run.sh [BUILD_DIR] - `zephon preprocess` against the
# encoder alone (and `zephon tokenize`), on the same text, in one run
# (issue 11, 8c: preprocess MB/s per thread at 1 and 2 threads >= 80% of
# the encoder's).
#
#   BUILD_DIR   a CMake build folder of this repository (default: build/bench,
#               shared with bench/tokenize_cli); configured here (Release,
#               no tests, no MPI) when it does not exist yet.
#   MB=32       size of the generated text in megabytes (environment)
#   PASSES=3    passes per measurement; the best one counts, and against the
#               floor also the median of each pass's own ratio (environment)
#   FORMAT=h5   output format (h5 or megatron; megatron when this build has
#               no HDF5 writer)
#   ZSTD=1      also measure a .jsonl.zst input (2 threads)
#
# The text is bench/tokenizer/gen_text.mjs's (deterministic, English-heavy,
# ~8% multilingual) when node is installed, else `zephon gen`'s, written as
# one JSONL shard. The encoder alone is bench_tokenizer (bench/tokenizer):
# every document already in memory, one encoder per thread, each thread on
# its own half. MB/s is 10^6 bytes of document text (the decoded "text"
# strings) per second for every line, so the ratios compare like with like;
# preprocess is also given in MB/s of JSONL in (the file's bytes). The
# preprocess figures are wall clock of the whole command (tokenizer load,
# reading the shard, encoding, writing the output, the manifest) and, beside
# them, the run alone as the command reports it (from its first shard to its
# last commit). The passes interleave the programs so that all see the same
# changes of load; the machine's other work lowers every figure.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build/bench}
mb=${MB:-32}
passes=${PASSES:-3}
fmt=${FORMAT:-h5}

if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "== configuring $build (Release)"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF \
        -DZEPHON_WITH_MPI=OFF >/dev/null
fi
echo "== building zephon and bench_tokenizer in $build"
cmake --build "$build" --target zephon_cli bench_tokenizer bench_floor_cli -j "$(nproc)" >/dev/null
bench="$build/bench_tokenizer"
floor="$build/bench_floor"
zephon="$build/zephon"
[ -x "$bench" ] && [ -x "$zephon" ] || { echo "run.sh: binaries not found in $build" >&2; exit 1; }

out="$build/preprocess_bench"
mkdir -p "$out"
text="$out/text-${mb}MB.jsonl"
if [ ! -s "$text" ]; then
    if command -v node >/dev/null; then
        node "$root/bench/tokenizer/gen_text.mjs" "$text" "$mb" > "$out/text-${mb}MB.txt"
    else
        "$zephon" gen --out "$out/gen" --shards 1 --bytes "${mb}M" --format jsonl >/dev/null
        mv "$out/gen/shard-00000.jsonl" "$text"
        echo "text: zephon gen, ${mb} MB" > "$out/text-${mb}MB.txt"
        rm -rf "$out/gen"
    fi
fi
if [ "${ZSTD:-1}" = 1 ] && command -v zstd >/dev/null && [ ! -s "$text.zst" ]; then
    zstd -q -f -3 "$text" -o "$text.zst"
fi
echo '{"text": "probe"}' > "$out/probe.jsonl"
if ! "$zephon" preprocess --quiet --no-progress --force --out "$out/probe" --format "$fmt" \
        "$out/probe.jsonl" >/dev/null 2>"$out/probe.err" &&
   grep -q "no .* writer" "$out/probe.err"; then
    echo "== this build has no $fmt writer: using megatron"
    fmt=megatron
fi

echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
echo "== load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== $(cat "$out/text-${mb}MB.txt" 2>/dev/null || echo "text: $text")"

get() { printf '%s\n' "$1" | awk -v k="$2" '$1 == k { print $2 }'; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.1f", b / s / 1e6; else print "n/a" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
lo() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b < a) ? b : a }'; }
hi() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b > a) ? b : a }'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "n/a" }'; }

# preprocess: prints "wall run" seconds (run: the command's own figure)
time_pp() { # threads file
    local t s
    rm -rf "$out/pp"
    TIMEFORMAT='%R'
    t=$( { time "$zephon" preprocess --no-progress --out "$out/pp" --format "$fmt" --threads "$1" "$2" \
            > "$out/pp.txt" 2>"$out/pp.err"; } 2>&1 ) || { echo "0 0"; return; }
    s=$(sed -n 's/.* MB out.*, \([0-9.]*\) s, .*/\1/p' "$out/pp.txt")
    echo "$t ${s:-0}"
}
time_tok() { # threads file
    TIMEFORMAT='%R'
    { time "$zephon" tokenize --threads="$1" "$2" > "$out/ids.txt" 2>/dev/null; } 2>&1 || echo 0
}

# The floor (bench/floor): read, parse, encode the same file in a tight
# loop on the same threads, the lines split between them; its MB/s.
floor_mbps() { # threads file
    "$floor" --threads "$1" --rounds 1 --no-hash "$2" | sed -n 's/^floor: .*: \([0-9.]*\) MB\/s.*/\1/p'
}

echo "== measuring (best of $passes passes each, interleaved; output format $fmt)"
e1= e2= f1= f2= t1= t2= p1= p2= r1= r2= pz= rz=
# per pass: the ratios of that pass's own figures (the floor, then the
# commands right after it), whose median is steadier than the ratio of
# the bests on a machine whose speed drifts
pr_t1= pr_t2= pr_p1= pr_p2=
for _ in $(seq "$passes"); do
    z=$("$bench" "$text" 1)
    bytes=$(get "$z" bytes)
    a1=$(floor_mbps 1 "$text"); a2=$(floor_mbps 2 "$text")
    f1=$(hi "$f1" "$a1"); f2=$(hi "$f2" "$a2")
    e1=$(hi "$e1" "$(get "$z" mbps_1t)"); e2=$(hi "$e2" "$(get "$z" mbps_2t)")
    x=$(time_tok 1 "$text"); t1=$(lo "$t1" "$x"); pr_t1="$pr_t1 $(ratio "$(mbps "$bytes" "$x")" "$a1")"
    x=$(time_tok 2 "$text"); t2=$(lo "$t2" "$x"); pr_t2="$pr_t2 $(ratio "$(mbps "$bytes" "$x")" "$a2")"
    read -r w s < <(time_pp 1 "$text"); p1=$(lo "$p1" "$w"); r1=$(lo "$r1" "$s")
    pr_p1="$pr_p1 $(ratio "$(mbps "$bytes" "$w")" "$a1")"
    read -r w s < <(time_pp 2 "$text"); p2=$(lo "$p2" "$w"); r2=$(lo "$r2" "$s")
    pr_p2="$pr_p2 $(ratio "$(mbps "$bytes" "$w")" "$a2")"
    if [ -s "$text.zst" ]; then
        read -r w s < <(time_pp 2 "$text.zst"); pz=$(lo "$pz" "$w"); rz=$(lo "$rz" "$s")
    fi
done
# median [min..max] of a list of numbers
med() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f [%.2f..%.2f]", m, v[1], v[NR] }'; }
jbytes=$(stat -c %s "$text")
[ -s "$out/pp.err" ] && { echo "preprocess said:"; cat "$out/pp.err"; }

P1=$(mbps "$bytes" "$p1"); P2=$(mbps "$bytes" "$p2"); R1=$(mbps "$bytes" "$r1"); R2=$(mbps "$bytes" "$r2")
T1=$(mbps "$bytes" "$t1"); T2=$(mbps "$bytes" "$t2")
echo
echo "text: $bytes bytes of document text, $(get "$z" docs) documents, $(get "$z" tokens) tokens;"
echo "      input $jbytes bytes of JSONL"
printf '%-48s %12s %14s\n' "MB/s (10^6 bytes of text per second)" "total" "per thread"
printf '%-48s %12s %14s\n' "encoder alone, 1 thread" "$e1" "$e1"
printf '%-48s %12s %14s\n' "encoder alone, 2 threads" "$e2" "$(div "$e2" 2)"
printf '%-48s %12s %14s\n' "floor (read, parse, encode), 1 thread" "$f1" "$f1"
printf '%-48s %12s %14s\n' "floor (read, parse, encode), 2 threads" "$f2" "$(div "$f2" 2)"
printf '%-48s %12s %14s\n' "zephon tokenize, 1 thread" "$T1" "$T1"
printf '%-48s %12s %14s\n' "zephon tokenize, 2 threads" "$T2" "$(div "$T2" 2)"
printf '%-48s %12s %14s\n' "zephon preprocess, 1 thread (whole command)" "$P1" "$P1"
printf '%-48s %12s %14s\n' "zephon preprocess, 2 threads (whole command)" "$P2" "$(div "$P2" 2)"
printf '%-48s %12s %14s\n' "zephon preprocess, 1 thread (run alone)" "$R1" "$R1"
printf '%-48s %12s %14s\n' "zephon preprocess, 2 threads (run alone)" "$R2" "$(div "$R2" 2)"
[ -n "$pz" ] && printf '%-48s %12s %14s\n' "zephon preprocess, 2 threads, jsonl.zst (command)" "$(mbps "$bytes" "$pz")" "$(div "$(mbps "$bytes" "$pz")" 2)"
echo
echo "MB/s of JSONL in (the file's bytes): preprocess 1 thread $(mbps "$jbytes" "$p1"), 2 threads $(mbps "$jbytes" "$p2") (whole command)"
echo
echo "ratios, preprocess / encoder alone, MB/s of text per thread (goal >= 0.80):"
echo "  1 thread:   $(ratio "$P1" "$e1") whole command, $(ratio "$R1" "$e1") run alone"
echo "  2 threads:  $(ratio "$P2" "$e2") whole command, $(ratio "$R2" "$e2") run alone"
echo "against the floor (issue 23, point 9: goal >= 0.92), whole commands:"
echo "  1 thread:   tokenize $(ratio "$T1" "$f1"), preprocess $(ratio "$P1" "$f1") ($(ratio "$R1" "$f1") run alone)"
echo "  2 threads:  tokenize $(ratio "$T2" "$f2"), preprocess $(ratio "$P2" "$f2") ($(ratio "$R2" "$f2") run alone)"
echo "against the floor, the median of each pass's own ratio [min..max] ($passes passes):"
echo "  1 thread:   tokenize $(med "$pr_t1"), preprocess $(med "$pr_p1")"
echo "  2 threads:  tokenize $(med "$pr_t2"), preprocess $(med "$pr_p2")"
echo "preprocess / zephon tokenize (both whole commands):"
echo "  1 thread:   $(ratio "$P1" "$T1")"
echo "  2 threads:  $(ratio "$P2" "$T2")"
