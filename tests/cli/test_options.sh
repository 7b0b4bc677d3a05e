#!/usr/bin/env bash
# test_options.sh ZEPHON - `zephon run` and `zephon gen` options:
#  1. every numeric option is range-checked: a malformed or out-of-range
#     value is a usage error (exit 2) naming the option and the value,
#     never a wrap or the default;
#  2. epoch arithmetic that would overflow is a clear error;
#  3. --map strip --field X reads and writes field X; a record without X
#     is an error naming the field and the record.
set -u
Z=${1:?usage: test_options.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
export XDG_CACHE_HOME="$T/cache"

printf '{"id":1,"text":"one"}\n{"id":2,"text":"two"}\n{"id":3,"text":"three"}\n' > "$T/d.jsonl"

# 1. usage errors: exit 2, the message names the option and the value
#    (grep -F: the value as given)
usage_error() { # OPTION VALUE [ARGS...]: `zephon run` with ARGS fails as a usage error
  local opt=$1 val=$2; shift 2
  timeout 20 "$Z" run "$T/d.jsonl" --quiet "$@" >/dev/null 2>"$T/err"; local rc=$?
  check "run $* -> exit 2 ($rc)" '[[ $rc -eq 2 ]]'
  check "run $* -> names $opt and '$val'" 'grep -qF -- "$opt" "$T/err" && grep -qF -- "$val" "$T/err"'
}
usage_error --threads 4294967297 --threads 4294967297          # was: wrapped to 1 thread
usage_error --threads 0 --threads 0                             # was: the default
usage_error --microbatch 0 --microbatch 0
usage_error --epochs 99999999999999999999 --epochs 99999999999999999999
usage_error --epochs 4294967296 --epochs 4294967296             # was: wrapped to 0 = without end
usage_error --seq-len -1 --seq-len -1
usage_error --seq-len 12abc --seq-len 12abc
usage_error --pack bestfit:0 --pack bestfit:0                   # a window of no document
usage_error --pack bestfit:8x --pack bestfit:8x
usage_error --pack bestfit:1048577 --pack bestfit:1048577       # above ZP_PACK_WINDOW_MAX
usage_error --prefetch 3:x --prefetch 3:x
usage_error --prefetch 18446744073709551616 --prefetch 18446744073709551616
usage_error --rank 4294967296 --rank 4294967296 --world-size 1  # was: wrapped to rank 0
usage_error --world-size 4294967297 --world-size 4294967297
usage_error --start-epoch 4294967295 --start-epoch 4294967295
usage_error --block-shards 0 --block-shards 0
usage_error --fetch-parallelism 99999999999 --fetch-parallelism 99999999999
usage_error --chunk-samples 0 --chunk-samples 0
usage_error --in-flight 1e3 --in-flight 1e3
usage_error --prefetch-batches 0 --prefetch-batches 0
usage_error --cache-mb 99999999999999999 --cache-mb 99999999999999999  # was: shifted out to 0
usage_error --fetch-delay-us 18446744073709551616 --fetch-delay-us 18446744073709551616
usage_error --seed 18446744073709551616 --seed 18446744073709551616
usage_error --max-batches 0 --max-batches 0
usage_error --report-every -3 --report-every -3
usage_error --balance-ranks 0 --balance-ranks 0
usage_error --balance-ranks 4097 --balance-ranks 4097
usage_error --step-time nan --step-time nan
usage_error --step-time -1 --step-time -1
usage_error --observe inf --observe=inf
usage_error --map strip:0 --map strip:0
usage_error --map strip:x --map strip:x
usage_error --tokenize gpt2:x --tokenize gpt2:x                 # was: tokenizer id "gpt2:x"
usage_error --epochs "" --epochs ""
"$Z" run "$T/d.jsonl" --quiet --epochs >/dev/null 2>"$T/err"; rc=$?
check "an option without its value -> exit 2" '[[ $rc -eq 2 ]] && grep -q -- "--epochs needs a value" "$T/err"'
RANK=abc WORLD_SIZE=2 "$Z" run "$T/d.jsonl" --quiet >/dev/null 2>"$T/err"; rc=$?
check "RANK=abc -> exit 2 naming RANK" '[[ $rc -eq 2 ]] && grep -q "RANK=abc" "$T/err"'
RANK=0 WORLD_SIZE=4294967297 "$Z" run "$T/d.jsonl" --quiet >/dev/null 2>"$T/err"; rc=$?
check "WORLD_SIZE out of range -> exit 2" '[[ $rc -eq 2 ]] && grep -q "WORLD_SIZE=4294967297" "$T/err"'
# values at the ends of the ranges are accepted
"$Z" run "$T/d.jsonl" --quiet --seed 18446744073709551615 --epochs 2 --max-batches 18446744073709551615 \
  --threads 1 --microbatch 1 --prefetch 1:1 --cache-mb 0 >/dev/null 2>"$T/err"; rc=$?
check "values at the ends of their ranges run (rc $rc)" '[[ $rc -eq 0 ]]'

gen_usage_error() {
  local opt=$1 val=$2
  timeout 20 "$Z" gen --out "$T/g" "$opt" "$val" >/dev/null 2>"$T/err"; local rc=$?
  check "gen $opt $val -> exit 2 ($rc)" '[[ $rc -eq 2 ]]'
  check "gen $opt $val -> names option and value" 'grep -qF -- "$opt" "$T/err" && grep -qF -- "$val" "$T/err"'
}
gen_usage_error --shards 0
gen_usage_error --shards 4294967297
gen_usage_error --samples-per-shard 18446744073709551616
gen_usage_error --bytes 1Q
gen_usage_error --bytes -5
gen_usage_error --threads 4294967297
gen_usage_error --zstd-level 99
gen_usage_error --seed -1
"$Z" gen --out "$T/g" --shards 2 --bytes 20kB --format jsonl >/dev/null 2>"$T/err"; rc=$?
check "gen --bytes 20kB runs" '[[ $rc -eq 0 ]] && [[ $(cat "$T"/g/*.jsonl | wc -c) -ge 20000 ]]'

# 2. epoch arithmetic: a manifest may claim counts no file holds; the
#    product epochs x samples per rank and the epoch numbers must fit
printf '{"format_version": 1, "shards": [{"path": "d.jsonl", "samples": 1099511627776}]}\n' > "$T/huge.json"
"$Z" run "$T/huge.json" --quiet --epochs 4294967295 --max-batches 1 >/dev/null 2>"$T/err"; rc=$?
check "epochs x samples per rank overflow -> exit 2, says so" '[[ $rc -eq 2 ]] && grep -q "overflows" "$T/err"'
"$Z" run "$T/d.jsonl" --quiet --start-epoch 4294967294 --epochs 2 --max-batches 3 >/dev/null 2>"$T/err"; rc=$?
check "start epoch + epochs past 2^32 - 1 -> exit 2 naming both" \
  '[[ $rc -eq 2 ]] && grep -q -- "--start-epoch 4294967294" "$T/err" && grep -q -- "--epochs 2" "$T/err"'
"$Z" run "$T/d.jsonl" --quiet --start-epoch 4294967294 --epochs 1 --no-shuffle --microbatch 1 --emit-digest "$T/last.txt" >/dev/null 2>"$T/err"; rc=$?
check "the last epoch number itself runs" '[[ $rc -eq 0 ]] && [[ $(awk "{print \$2}" "$T/last.txt" | sort -u) == 4294967294 ]]'

# 3. --map strip --field X: reads and writes X, keeps every other byte.
#    a.jsonl stripped must equal b.jsonl as it is (the "text" fields differ
#    from "body", so reading "text" or writing only X shows).
printf '{"id": 1, "body": "  hello \\t ", "text": "T1", "n": 18446744073709551615}\n{"id": 2, "body": "\\n x y\\u00e9 ", "text": " T2 "}\n{"id": 3, "body": "z"}\n' > "$T/a.jsonl"
printf '{"id": 1, "body": "hello", "text": "T1", "n": 18446744073709551615}\n{"id": 2, "body": "x y\xc3\xa9", "text": " T2 "}\n{"id": 3, "body": "z"}\n' > "$T/b.jsonl"
"$Z" run "$T/a.jsonl" --quiet --no-shuffle --microbatch 1 --map strip:2 --field body --emit-digest "$T/sa.txt" >/dev/null 2>"$T/err"; rc=$?
check "strip --field body runs (rc $rc)" '[[ $rc -eq 0 ]]'
"$Z" run "$T/b.jsonl" --quiet --no-shuffle --microbatch 1 --emit-digest "$T/sb.txt" >/dev/null || bad "run b.jsonl"
check "strip --field body: the records are b.jsonl's, byte for byte" 'cmp -s "$T/sa.txt" "$T/sb.txt"'
"$Z" run "$T/a.jsonl" --quiet --no-shuffle --microbatch 1 --map strip --emit-digest "$T/st.txt" >/dev/null 2>"$T/err"; rc=$?
check "strip (field text) on a record without text fails" '[[ $rc -eq 1 ]] && grep -q "no field '"'"'text'"'"'" "$T/err" && grep -q "line 3" "$T/err"'
# tokenized: the stripped body is what is encoded
"$Z" run "$T/a.jsonl" --quiet --no-shuffle --microbatch 1 --seq-len 8 --pack pad --tokenize gpt2 --field body --map strip --emit-digest "$T/ta.txt" >/dev/null 2>"$T/err" || bad "tokenize a"
"$Z" run "$T/b.jsonl" --quiet --no-shuffle --microbatch 1 --seq-len 8 --pack pad --tokenize gpt2 --field body --emit-digest "$T/tb.txt" >/dev/null 2>"$T/err" || bad "tokenize b"
check "strip + tokenize --field body encodes the stripped body" 'cmp -s "$T/ta.txt" "$T/tb.txt"'
# a record without the field: an error naming the field and the record
printf '{"body": " a "}\n{"text": " b "}\n' > "$T/miss.jsonl"
"$Z" run "$T/miss.jsonl" --quiet --no-shuffle --map strip --field body >/dev/null 2>"$T/err"; rc=$?
check "strip: missing field -> exit 1" '[[ $rc -eq 1 ]]'
check "strip: missing field -> names field, shard and line" \
  'grep -q "no field '"'"'body'"'"'" "$T/err" && grep -q "miss.jsonl" "$T/err" && grep -q "line 2" "$T/err"'
printf '{"body": 5}\n' > "$T/num.jsonl"
"$Z" run "$T/num.jsonl" --quiet --map strip --field body >/dev/null 2>"$T/err"; rc=$?
check "strip: a field that is not a string -> exit 1, says so" '[[ $rc -eq 1 ]] && grep -q "not a string" "$T/err"'
"$Z" run "$T/miss.jsonl" --quiet --no-shuffle --map strip --field body --skip-bad-records > "$T/out" 2>"$T/err"; rc=$?
check "strip: --skip-bad-records skips and counts it" '[[ $rc -eq 0 ]] && grep -q "skipped 1" "$T/out"'

finish
