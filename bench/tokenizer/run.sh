#!/bin/sh
# bench/tokenizer/run.sh [BUILD_DIR] - Zephon's GPT-2 tokenizer (then cl100k_base
# and o200k_base, against GPT-2 and Python tiktoken) against
# tiktoken, on the same text, in one run (see docs/tokenizer.md).
#
#   BUILD_DIR   a CMake build folder of this repository (default: build);
#               configured here (Release) when it does not exist yet.
#   MB=32       size of the generated text in megabytes (environment)
#   PASSES=3    passes per measurement; the best one counts (environment)
#
# It installs the reference tokenizers into bench/tokenizer/node_modules
# (npm: tiktoken-node = tiktoken's Rust core as a native Node module, and
# tiktoken = the same core compiled to WASM), builds the bench_tokenizer
# target, generates the text (bench/tokenizer/out/, deterministic) and prints
# the figures and their ratios.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
mb=${MB:-32}
passes=${PASSES:-3}

command -v node >/dev/null || { echo "run.sh: node is required" >&2; exit 1; }
command -v npm >/dev/null || { echo "run.sh: npm is required" >&2; exit 1; }

# ------------------------------------------------------------ references
echo "== installing reference tokenizers into $here/node_modules"
(cd "$here" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
if ! (cd "$here" && node -e "require('tiktoken-node').getEncoding('gpt2').encode('x')") 2>/dev/null; then
    echo "tiktoken-node does not load here; trying @anysphere/tiktoken-node"
    (cd "$here" && npm install --no-save --no-audit --no-fund --loglevel=error @anysphere/tiktoken-node >/dev/null) || true
fi

# ------------------------------------------------------------ zephon
if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "== configuring $build (Release)"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
echo "== building bench_tokenizer in $build"
cmake --build "$build" --target bench_tokenizer -j "$(nproc)" >/dev/null
bench=$(find "$build" -name bench_tokenizer -type f -perm -u+x | head -n 1)
[ -n "$bench" ] || { echo "run.sh: bench_tokenizer not found in $build" >&2; exit 1; }

# ------------------------------------------------------------ text
mkdir -p "$here/out"
text="$here/out/text-${mb}MB.jsonl"
desc="$here/out/text-${mb}MB.txt"
if [ ! -s "$text" ] || [ ! -s "$desc" ] || [ "$here/gen_text.mjs" -nt "$text" ]; then
    node "$here/gen_text.mjs" "$text" "$mb" > "$desc"
fi

# ------------------------------------------------------------ measure
echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
echo "== $(cat "$desc")"
echo "== measuring (best of $passes passes each; this takes a minute or two)"
z=$("$bench" "$text" "$passes")
r=$(node "$here/bench_ref.mjs" "$text" "$passes")

get() { printf '%s\n' "$1" | awk -v k="$2" '$1 == k { print $2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1fx", a / b; else print "n/a" }'; }

z1=$(get "$z" mbps_1t); znc=$(get "$z" mbps_1t_nocache); z2=$(get "$z" mbps_2t)
zc=$(get "$z" cpu_mbps_1t); zcnc=$(get "$z" cpu_mbps_1t_nocache)
n=$(get "$r" native_mbps); nc=$(get "$r" native_cpu_mbps); nimpl=$(get "$r" native_impl)
w=$(get "$r" wasm_mbps); wc=$(get "$r" wasm_cpu_mbps); wimpl=$(get "$r" wasm_impl)
zt=$(get "$z" tokens); nt=$(get "$r" native_tokens); wt=$(get "$r" wasm_tokens)

echo
echo "text: $(get "$z" bytes) bytes, $(get "$z" docs) documents, $zt tokens ($(get "$z" bytes_per_token) bytes/token)"
printf '%-44s %10s %12s\n' "single thread (MB/s = 10^6 bytes/s)" "wall" "CPU time"
printf '%-44s %10s %12s\n' "zephon (cache on)" "$z1" "$zc"
printf '%-44s %10s %12s\n' "zephon (cache off)" "$znc" "$zcnc"
printf '%-44s %10s %12s\n' "tiktoken native ($nimpl)" "${n:-n/a}" "${nc:-n/a}"
printf '%-44s %10s %12s\n' "tiktoken WASM ($wimpl)" "$w" "$wc"
echo
echo "ratios (zephon cache on / reference):"
echo "  vs tiktoken native: $(ratio "$z1" "${n:-0}") wall, $(ratio "$zc" "${nc:-0}") CPU time"
echo "  vs tiktoken WASM:   $(ratio "$z1" "$w") wall, $(ratio "$zc" "$wc") CPU time"
echo "  cache on / off:     $(ratio "$z1" "$znc") wall, $(ratio "$zc" "$zcnc") CPU time"
echo
echo "zephon threads (one encoder each, each on its own half): 1 thread $z1 MB/s, 2 threads $z2 MB/s ($(ratio "$z2" "$z1"))"
echo "vocabulary load (zp_tokenizer_create(\"gpt2\")): min $(get "$z" load_ms_min) ms, median $(get "$z" load_ms_median) ms"
echo "memory: tokenizer $(get "$z" tokenizer_bytes) bytes (zp_tokenizer_memory), encoder $(get "$z" encoder_bytes) bytes (zp_encoder_memory);"
echo "        resident set growth: $(get "$z" rss_after_create_bytes) bytes after creating both, $(get "$z" rss_after_one_pass_bytes) after one pass over the text"
echo
if [ "$zt" = "$wt" ]; then
    echo "token counts: zephon = tiktoken WASM ($zt)"
else
    echo "token counts DIFFER: zephon $zt, tiktoken WASM $wt" >&2
fi
if [ -n "$nt" ] && [ "$nt" != "$zt" ]; then
    echo "token counts: native $nt differs from zephon/WASM $zt: $nimpl is built with Unicode 15.0 tables (the text has Unicode 15.1/16.0 letters); WASM tiktoken and zephon use Unicode 16.0"
fi

# ------------------------------------------------------------ tiktoken family
# cl100k_base and o200k_base against GPT-2 (same text, same run) and against
# Python tiktoken (tools/tokref.sh's venv: the references of the parity
# tests). CPU-time MB/s are printed beside wall clock: on a shared machine
# they are the steadier figure.
echo
echo "== tiktoken family: zephon gpt2 / cl100k_base / o200k_base and Python tiktoken (single thread)"
zc1=$(get "$z" cpu_mbps_1t)
printf '%-14s %10s %10s %12s %12s %10s %10s\n' "encoding" "zephon" "(CPU)" "tiktoken py" "(CPU)" "vs gpt2" "vs tiktoken"
tokref=$("$root/tools/tokref.sh" 2>/dev/null | tail -n 1) || tokref=
py=
if [ -n "$tokref" ] && [ -x "$tokref/venv/bin/python" ]; then
    py=$("$tokref/venv/bin/python" "$here/bench_tiktoken.py" "$tokref" "$text" "$passes")
else
    echo "(tools/tokref.sh failed: no Python tiktoken figures)"
fi
for enc in gpt2 cl100k_base o200k_base; do
    if [ "$enc" = gpt2 ]; then ze=$z; else ze=$("$bench" "$text" "$passes" "$enc"); fi
    zw=$(get "$ze" mbps_1t); zc=$(get "$ze" cpu_mbps_1t)
    tw=$(get "$py" "${enc}_mbps"); tc=$(get "$py" "${enc}_cpu_mbps")
    printf '%-14s %10s %10s %12s %12s %10s %10s\n' "$enc" "$zw" "$zc" "${tw:-n/a}" "${tc:-n/a}" \
        "$(ratio "$zc" "$zc1")" "$(ratio "$zc" "${tc:-0}")"
    tt=$(get "$py" "${enc}_tokens"); zt2=$(get "$ze" tokens)
    if [ -n "$tt" ] && [ "$tt" != "$zt2" ]; then
        echo "token counts DIFFER for $enc: zephon $zt2, tiktoken $tt" >&2
    fi
    echo "  $enc: load $(get "$ze" load_ms_median) ms (median), tokenizer $(get "$ze" tokenizer_bytes) bytes, 2 threads $(get "$ze" mbps_2t) MB/s"
done
echo "(vs gpt2, vs tiktoken: ratios of CPU-time MB/s)"

