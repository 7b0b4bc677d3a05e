#!/usr/bin/env bash
# test_token_ids.sh ZEPHON - a tokenize field that is an array of token ids
# (a pre-tokenized document: Parquet's list<int> input_ids, or the same in a
# JSON line; docs/formats.md "Pre-tokenized documents"), and --emit-records:
#  1. --field input_ids over JSON lines whose input_ids are the GPT-2 ids of
#     the text (from `zephon tokenize`) gives the batches of tokenizing the
#     text (digests equal; with a trailing EOT stored too);
#  2. a bad element (negative, fractional, a string), an id outside the
#     vocabulary, and a field that is neither a text nor ids are bad records
#     naming the shard and line (exit 1; counted with --skip-bad-records);
#  3. --emit-records writes the records as delivered (record mode), and is
#     refused with --tokenize.
set -u
Z=${1:?usage: test_token_ids.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"

"$Z" gen --out "$T/txt" --format jsonl --shards 2 --bytes 300K --seed 3 >/dev/null || bad "gen"
mkdir -p "$T/ids" "$T/eot"
for f in "$T"/txt/*.jsonl; do
  b=$(basename "$f")
  "$Z" tokenize --threads 1 "$f" > "$T/$b.ids" || bad "tokenize $b"
  python3 - "$f" "$T/$b.ids" "$T/ids/$b" "$T/eot/$b" <<'PY' || bad "make ids $b"
import json, sys
src, ids, out, eot = sys.argv[1:]
with open(src) as a, open(ids) as b, open(out, "w") as o, open(eot, "w") as e:
    for line, toks in zip(a, b):
        rec = json.loads(line); t = json.loads(toks)
        o.write(json.dumps({"id": rec.get("id"), "input_ids": t}) + "\n")
        e.write(json.dumps({"input_ids": t + [50256]}) + "\n")
PY
done

RUN="--quiet --tokenize gpt2 --seq-len 128 --microbatch 4 --seed 5"
"$Z" run "$T/txt" $RUN --emit-digest "$T/d.txt" >/dev/null 2>"$T/err" || { bad "run text"; cat "$T/err"; }
"$Z" run "$T/ids" $RUN --field input_ids --emit-digest "$T/d.ids" >/dev/null 2>"$T/err" || { bad "run ids"; cat "$T/err"; }
"$Z" run "$T/eot" $RUN --field input_ids --emit-digest "$T/d.eot" >/dev/null 2>"$T/err" || { bad "run ids+eot"; cat "$T/err"; }
check "ids field: the batches of tokenizing the text ($(wc -l < "$T/d.txt") batches)" \
  '[[ -s $T/d.txt ]] && cmp -s "$T/d.txt" "$T/d.ids"'
check "ids with a trailing EOT stored: the same batches" 'cmp -s "$T/d.txt" "$T/d.eot"'

# 2. bad ids
mkdir -p "$T/bad"
badcase() { # NAME JSON-VALUE EXPECTED-MESSAGE
  want=$3
  printf '{"input_ids":[1,2,3]}\n{"input_ids":%s}\n{"input_ids":[4]}\n' "$2" > "$T/bad/b.jsonl"
  "$Z" run "$T/bad/b.jsonl" $RUN --field input_ids >/dev/null 2>"$T/err"; rc=$?
  check "$1: exit 1, names the shard and line: $3" \
    '[[ $rc -eq 1 ]] && grep -q "b.jsonl" "$T/err" && grep -Eq "line 2|record 1" "$T/err" && grep -q -- "$want" "$T/err"'
  "$Z" run "$T/bad/b.jsonl" $RUN --field input_ids --skip-bad-records --json >"$T/out" 2>"$T/err"; rc=$?
  check "$1 with --skip-bad-records: exit 0, one skipped" \
    '[[ $rc -eq 0 ]] && grep -q "\"skipped\": *1\b" "$T/out"'
}
badcase "a negative id" '[5,-1]' "element 1 is not a token id"
badcase "a fractional id" '[5,6,2.5]' "element 2 is not a token id"
badcase "a string element" '["a"]' "element 0 is not a token id"
badcase "an id outside the vocabulary" '[5,99999]' "outside the tokenizer's vocabulary"
badcase "null" 'null' "is not a string or an array of token ids"

# 3. --emit-records
"$Z" run "$T/txt" --quiet --no-shuffle --emit-records "$T/rec" >/dev/null 2>"$T/err" || { bad "emit-records"; cat "$T/err"; }
check "--emit-records: the records as stored, in order" 'cat "$T"/txt/*.jsonl | cmp -s - "$T/rec/rank-0.jsonl"'
"$Z" run "$T/txt" --quiet --tokenize gpt2 --emit-records "$T/rec2" >/dev/null 2>"$T/err"; rc=$?
check "--emit-records with --tokenize: usage error (exit 2)" '[[ $rc -eq 2 ]] && grep -q "record mode" "$T/err"'
finish
