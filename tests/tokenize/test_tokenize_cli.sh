#!/usr/bin/env bash
# tests/tokenize/test_tokenize_cli.sh ZEPHON DATA_DIR - `zephon tokenize`:
# output byte-identical to the expected ids (tests/data/tokenizer) and to the
# output of the single-threaded jansson implementation it replaced
# (edge.expected, recorded from it), at every thread count, through a file,
# standard input and zstd; errors name the file and line; write errors fail.
set -uo pipefail
Z=$1
DATA=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/zp_tokenize_cli_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# expected.jsonl holds {"ids":[...]} per corpus line; the command prints [...]
sed -e 's/^{"ids"://' -e 's/}$//' "$DATA/tokenizer/expected.jsonl" > "$tmp/corpus.expected"
corpus=$DATA/tokenizer/corpus.jsonl

same() { # what, expected file, command...
    local what=$1 exp=$2; shift 2
    if "$@" > "$tmp/out" 2> "$tmp/err" && cmp -s "$tmp/out" "$exp"; then
        ok "$what"
    else
        fail "$what: output differs from $exp or exit status non-zero ($(head -c 300 "$tmp/err"))"
    fi
}

for t in 1 2 3 8; do
    same "corpus, --threads $t" "$tmp/corpus.expected" "$Z" tokenize --threads "$t" "$corpus"
    same "edge cases, --threads $t" "$here/edge.expected" "$Z" tokenize --threads="$t" "$here/edge.jsonl"
done
same "corpus, OMP_NUM_THREADS=2 default" "$tmp/corpus.expected" env OMP_NUM_THREADS=2 "$Z" tokenize "$corpus"
same "corpus, standard input" "$tmp/corpus.expected" sh -c "'$Z' tokenize --threads 2 - < '$corpus'"
same "corpus, no file argument" "$tmp/corpus.expected" sh -c "'$Z' tokenize < '$corpus'"

# zstd: by file, by standard input (recognised by its magic number), and
# several frames one after the other
zstd -q -c "$corpus" > "$tmp/corpus.jsonl.zst"
same "corpus.jsonl.zst" "$tmp/corpus.expected" "$Z" tokenize --threads 2 "$tmp/corpus.jsonl.zst"
same "zstd on standard input" "$tmp/corpus.expected" sh -c "'$Z' tokenize < '$tmp/corpus.jsonl.zst'"
head -n 100 "$corpus" | zstd -q -c > "$tmp/multi.jsonl.zst"
tail -n +101 "$corpus" | zstd -q -c >> "$tmp/multi.jsonl.zst"
same "two zstd frames" "$tmp/corpus.expected" "$Z" tokenize "$tmp/multi.jsonl.zst"

# From a pipe, each line is encoded and written when it comes (the command
# does not wait for a full block or the end of the input)
mkfifo "$tmp/fifo"
"$Z" tokenize --threads 2 < "$tmp/fifo" > "$tmp/stream.out" 2>&1 &
zpid=$!
exec 3<> "$tmp/fifo"  # read-write: never blocks, even if the command is gone
echo '{"text":"Hello world"}' >&3
for _ in $(seq 300); do [[ -s "$tmp/stream.out" ]] && break; sleep 0.1; done
first=$(cat "$tmp/stream.out")
echo '{"text":"a"}' >&3
exec 3>&-
wait $zpid
if [[ "$first" == "[15496,995]" && "$(cat "$tmp/stream.out")" == $'[15496,995]\n[64]' ]]; then
    ok "a pipe's lines are written as they come"
else
    fail "streaming from a pipe: '$first' before the input ended, '$(cat "$tmp/stream.out")' at the end"
fi

# Many blocks (256 KiB of input per thread each): the corpus 80 times (5.4 MB)
for i in $(seq 80); do cat "$corpus"; done > "$tmp/big.jsonl"
for i in $(seq 80); do cat "$tmp/corpus.expected"; done > "$tmp/big.expected"
for t in 1 2 3; do
    same "5.4 MB in many blocks, --threads $t" "$tmp/big.expected" "$Z" tokenize --threads "$t" "$tmp/big.jsonl"
done
zstd -q -c "$tmp/big.jsonl" > "$tmp/big.jsonl.zst"
same "5.4 MB jsonl.zst, --threads 2" "$tmp/big.expected" "$Z" tokenize --threads 2 "$tmp/big.jsonl.zst"

# A line longer than a block (a 5 MB field that is not tokenized)
{
    echo '{"text":"first"}'
    printf '{"pad":"'; head -c 5000000 /dev/zero | tr '\0' 'x'; echo '","text":"Hello world"}'
    echo '{"text":"last"}'
} > "$tmp/long.jsonl"
printf '[11085]\n[15496,995]\n[12957]\n' > "$tmp/long.expected"
for t in 1 2; do
    same "a 5 MB line, --threads $t" "$tmp/long.expected" "$Z" tokenize --threads "$t" "$tmp/long.jsonl"
done

# Errors: exit status 1, the message names the file and the line, and the
# lines before the bad one are printed (and nothing after it).
bad() { # what, file, expected stdout lines, message pattern, threads
    local what=$1 f=$2 lines=$3 pat=$4 t=${5:-2}
    "$Z" tokenize --threads "$t" "$f" > "$tmp/out" 2> "$tmp/err"
    local rc=$? n
    n=$(wc -l < "$tmp/out")
    if [[ $rc -eq 1 && $n -eq $lines ]] && grep -qF -- "$pat" "$tmp/err"; then
        ok "$what"
    else
        fail "$what: exit $rc, $n lines out (want 1, $lines), message: $(cat "$tmp/err") (want '$pat')"
    fi
}
# 306 corpus lines x 80 = 24480 good lines, then the bad line
n=24480
for t in 1 2 3; do
    { cat "$tmp/big.jsonl"; echo '{"text": "broken"'; cat "$corpus"; } > "$tmp/e.jsonl"
    bad "malformed JSON after many blocks, --threads $t" "$tmp/e.jsonl" "$n" "$tmp/e.jsonl:$((n + 1)): invalid JSON" "$t"
done
{ cat "$corpus"; printf '\n{"txt": "x"}\n'; cat "$corpus"; } > "$tmp/e.jsonl"
bad "missing field (a blank line before it counts)" "$tmp/e.jsonl" 306 "$tmp/e.jsonl:308: no field 'text'"
{ cat "$corpus"; printf '{"text": "caf\xc3"}\n'; } > "$tmp/e.jsonl"
bad "invalid UTF-8" "$tmp/e.jsonl" 306 "$tmp/e.jsonl:307: invalid JSON: invalid UTF-8"
printf '{"text": "a"}\n{"text": 5}\n' > "$tmp/e.jsonl"
bad "field not a string" "$tmp/e.jsonl" 1 "$tmp/e.jsonl:2: field 'text' is not a string"
printf '{"text": "a"}\n[1, 2]\n' > "$tmp/e.jsonl"
bad "not an object" "$tmp/e.jsonl" 1 "$tmp/e.jsonl:2: not a JSON object"
printf '{"text": "a"}\n{"text": "b"} x\n' > "$tmp/e.jsonl"
bad "trailing content" "$tmp/e.jsonl" 1 "$tmp/e.jsonl:2: invalid JSON"
head -c $(($(stat -c %s "$tmp/big.jsonl.zst") - 30)) "$tmp/big.jsonl.zst" > "$tmp/trunc.jsonl.zst"
"$Z" tokenize "$tmp/trunc.jsonl.zst" > "$tmp/out" 2> "$tmp/err"
rc=$?; n=$(wc -l < "$tmp/out")
if [[ $rc -eq 1 && $n -gt 0 ]] && grep -qF "$tmp/trunc.jsonl.zst: truncated zstd frame after line $n" "$tmp/err"; then
    ok "truncated zstd file (after line $n)"
else
    fail "truncated zstd file: exit $rc, $n lines, message: $(cat "$tmp/err")"
fi
{ head -c 4 "$tmp/corpus.jsonl.zst"; head -c 5000 /dev/urandom; } > "$tmp/corrupt.jsonl.zst"
bad "corrupt zstd data" "$tmp/corrupt.jsonl.zst" 0 "$tmp/corrupt.jsonl.zst: corrupt zstd data"

# Write errors on standard output are reported with the system's reason
if [[ -w /dev/full ]]; then
    "$Z" tokenize "$corpus" > /dev/full 2> "$tmp/err"
    rc=$?
    if [[ $rc -eq 1 ]] && grep -qF "write error on standard output: No space left on device" "$tmp/err"; then
        ok "write error (/dev/full)"
    else
        fail "write error: exit $rc, message: $(cat "$tmp/err")"
    fi
fi

# --match-special: special tokens' strings are those tokens (a tokenizer.json
# written here: <s> id 1, special); by default they are ordinary text; a
# tokenizer that cannot match them (gpt2) refuses the option
mkdir -p "$tmp/tj"
cat > "$tmp/tj/tokenizer.json" <<'TJ'
{"version": "1.0", "added_tokens": [{"id": 1, "content": "<s>", "single_word": false,
 "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
 "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
 "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true,
  "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "ab": 5, "<": 6, "s": 7, ">": 8},
  "merges": ["a b"]}}
TJ
echo '{"eos_token": "</s>"}' > "$tmp/tj/tokenizer_config.json"
echo '{"text": "ab<s>ab"}' > "$tmp/special.jsonl"
out=$("$Z" tokenize --tokenizer "$tmp/tj" "$tmp/special.jsonl" 2>&1)
[[ $out == "[5,6,7,8,5]" ]] && ok "special token as text by default" || fail "default: $out"
out=$("$Z" tokenize --tokenizer "$tmp/tj" --match-special "$tmp/special.jsonl" 2>&1)
[[ $out == "[5,1,5]" ]] && ok "--match-special" || fail "--match-special: $out"
"$Z" tokenize --match-special "$tmp/special.jsonl" > /dev/null 2> "$tmp/err"
rc=$?
if [[ $rc -eq 1 ]] && grep -qF "match_special" "$tmp/err"; then
    ok "--match-special refused for gpt2"
else
    fail "--match-special with gpt2: exit $rc, message: $(cat "$tmp/err")"
fi

# Usage errors: exit status 2, naming the option and the value
for a in "--threads 0" "--threads 1025" "--threads x" "--threads=-1" "--threads" "--bogus"; do
    "$Z" tokenize $a "$corpus" > /dev/null 2> "$tmp/err"
    rc=$?
    if [[ $rc -eq 2 ]]; then ok "usage error: $a"; else fail "usage error '$a': exit $rc"; fi
done
"$Z" tokenize --threads 0 "$corpus" > /dev/null 2> "$tmp/err"
grep -qF -- "--threads '0'" "$tmp/err" && ok "usage error names the option and the value" || fail "usage error message: --threads '0' not named"

if [[ $fails -gt 0 ]]; then
    echo "$fails check(s) failed" >&2
    exit 1
fi
echo "all checks passed"
