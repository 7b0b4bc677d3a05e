#!/usr/bin/env bash
# test_mixture_cli.sh ZEPHON - mixtures from the command line:
#  1. --data a@0.7 --data b@0.2 --data c@0.1: the summary (text and --json)
#     prints the realized proportions, within one draw of the weights over
#     an epoch of 1,000 draws, and --emit-samples counts the same;
#  2. a --mixture file (relative specs resolved against its folder, a list
#     of specs for one part, epoch_samples) gives the same batches
#     (--emit-digest) as the --data form;
#  3. bad weights (0, -1, abc, nan, inf) are refused naming the value, exit 2,
#     and so are weights whose ratio the schedule cannot keep within 1%
#     (1e300 and 1), naming both parts; a small weight is printed with %g;
#     positional specs with --data, --data with --mixture, and bad mixture
#     files (naming the file and the field) too;
#  4. one part is no mixture: no proportions printed, the same batches as
#     the positional spec.
set -u
Z=$(realpath "${1:?usage: test_mixture_cli.sh PATH_TO_ZEPHON}")
. "$(dirname "$0")/../testlib.sh"
export XDG_CACHE_HOME="$T/cache"

"$Z" gen --out "$T/a" --shards 4 --samples-per-shard 120 --seed 1 >/dev/null || { echo "FAIL - gen a"; exit 1; }
"$Z" gen --out "$T/b" --shards 3 --samples-per-shard 50 --seed 2 >/dev/null || { echo "FAIL - gen b"; exit 1; }
"$Z" gen --out "$T/c" --shards 2 --samples-per-shard 20 --seed 3 >/dev/null || { echo "FAIL - gen c"; exit 1; }
cd "$T" || exit 1
base=(--quiet --seed 11 --microbatch 10 --threads 2)
common=("${base[@]}" --epoch-samples 1000)

# 1. proportions close to the weights
"$Z" run --data a@0.7 --data b@0.2 --data c@0.1 "${common[@]}" --json --emit-samples "$T/s1" \
  --emit-digest "$T/d1.txt" > "$T/j1.txt" 2> "$T/err"; rc=$?
check "3-part mixture runs (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/err"
check "--json summary: the realized sample fractions within one draw of 0.7/0.2/0.1" "python3 - '$T/j1.txt' <<'EOF'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
p = d['parts']
assert [x['name'] for x in p] == ['a', 'b', 'c'], p
assert sum(x['samples'] for x in p) == d['samples'] == 1000, (p, d['samples'])
for x, w in zip(p, (0.7, 0.2, 0.1)):
    assert abs(x['weight'] - w) < 1e-9, x
    assert abs(x['samples'] - 1000 * w) <= 1, x
    assert abs(x['sample_fraction'] - w) <= 0.001 + 1e-9, x
EOF"
check "--emit-samples: 700/200/100 draws per part (within one)" "python3 - '$T/s1/rank-0.samples' <<'EOF'
import sys, collections
c = collections.Counter()
keys = set()
for line in open(sys.argv[1]):
    batch, epoch, part, pas, padded, sid = line.split()
    c[int(part)] += 1
    keys.add((part, pas, sid))
assert len(keys) == sum(c.values()) == 1000, (len(keys), c)
for k, n in ((0, 700), (1, 200), (2, 100)):
    assert abs(c[k] - n) <= 1, c
EOF"
"$Z" run --data a@0.7 --data b@0.2 --data c@0.1 "${common[@]}" > "$T/t1.txt" 2>&1
check "text summary: a proportions table naming the parts" \
  'grep -q "mixture: realized proportions" "$T/t1.txt" && grep -Eq "^ +a +0\.7 +(699|700|701) " "$T/t1.txt" && grep -Eq "^ +c +0\.1 +(99|100|101) " "$T/t1.txt"'
# integer ratios are the same weights
"$Z" run --data a@7 --data b@2 --data c@1 "${common[@]}" --emit-digest "$T/d1i.txt" >/dev/null 2>&1
check "integer ratios 7/2/1 give the same batches as 0.7/0.2/0.1" 'cmp -s "$T/d1.txt" "$T/d1i.txt"'

# 2. the mixture file: same batches
mkdir -p "$T/mix"
cat > "$T/mix/m.json" <<'EOF'
{"parts": [
  {"name": "a", "data": "../a", "weight": 0.7},
  {"name": "b", "data": ["../b/shard-00000.jsonl.zst", "../b/shard-0000[12].jsonl.zst"], "weight": 0.2},
  {"name": "c", "data": "../c/manifest.json", "weight": 0.1}],
 "epoch_samples": 1000}
EOF
# (the file gives epoch_samples)
args=("${base[@]}")
"$Z" run --mixture "$T/mix/m.json" "${args[@]}" --emit-digest "$T/d2.txt" > /dev/null 2> "$T/err"; rc=$?
check "--mixture file runs (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/err"
"$Z" run --data a@0.7 --data "b/shard-0000[0-2].jsonl.zst@0.2" --data c/manifest.json@0.1 "${common[@]}" \
  --emit-digest "$T/d2ref.txt" > /dev/null 2>&1
check "--mixture file: the same --emit-digest as the --data form" \
  '[[ -s "$T/d2.txt" ]] && cmp -s "$T/d2.txt" "$T/d2ref.txt"'
check "--data with a folder, a glob or a manifest: the same batches" 'cmp -s "$T/d1.txt" "$T/d2ref.txt"'
"$Z" run --mixture "$T/mix/m.json" "${args[@]}" --epoch-samples 500 --emit-digest "$T/d3.txt" >/dev/null 2>&1
check "--epoch-samples wins over the file's epoch_samples (50 batches)" '[[ $(wc -l < "$T/d3.txt") -eq 50 ]]'
(cd "$T/mix" && "$Z" run --mixture m.json "${args[@]}" --emit-digest "$T/d4.txt" >/dev/null 2>&1)
check "relative specs resolve against the file's folder, not the working folder" 'cmp -s "$T/d2.txt" "$T/d4.txt"'

# 3. refusals
for w in 0 -1 abc nan inf; do
  "$Z" run --data "a@$w" --data b --quiet >/dev/null 2>"$T/err"; rc=$?
  check "weight '$w' refused, exit 2, naming the value ($rc)" '[[ $rc -eq 2 ]] && grep -qF -- "a@$w" "$T/err"'
done
"$Z" run a --data b --quiet >/dev/null 2>"$T/err"; rc=$?
check "positional spec + --data: usage error ($rc)" '[[ $rc -eq 2 ]] && grep -q "cannot be combined" "$T/err"'
"$Z" run --data b a --quiet >/dev/null 2>"$T/err"; rc=$?
check "--data + positional spec: usage error ($rc)" '[[ $rc -eq 2 ]] && grep -q "cannot be combined" "$T/err"'
"$Z" run --data b --mixture "$T/mix/m.json" --quiet >/dev/null 2>"$T/err"; rc=$?
check "--data + --mixture: usage error ($rc)" '[[ $rc -eq 2 ]] && grep -q "cannot be combined" "$T/err"'
bad_file() { # NAME JSON EXPECTED-TEXT
  local want=$3
  printf '%s\n' "$2" > "$T/mix/bad.json"
  "$Z" run --mixture "$T/mix/bad.json" --quiet >/dev/null 2>"$T/err"; local rc=$?
  check "mixture file: $1 refused naming the file and '$want' ($rc)" \
    '[[ $rc -eq 2 ]] && grep -qF "bad.json" "$T/err" && grep -qF -- "$want" "$T/err"'
}
bad_file "a negative weight" '{"parts":[{"data":"../a"},{"data":"../b","weight":-2}]}' "parts[1].weight"
bad_file "a weight as text" '{"parts":[{"data":"../a","weight":"0.5"}]}' "parts[0].weight"
bad_file "a misspelt field" '{"parts":[{"data":"../a","wieght":0.5}]}' "wieght"
bad_file "no data" '{"parts":[{"name":"x","weight":1}]}' "parts[0].data"
bad_file "no parts" '{"epoch_samples":10}' "parts"
bad_file "a bad epoch_samples" '{"parts":[{"data":"../a"}],"epoch_samples":-3}' "epoch_samples"
bad_file "two parts of one name" '{"parts":[{"name":"x","data":"../a"},{"name":"x","data":"../b"}]}' "'x'"
bad_file "broken JSON" '{"parts":[{"data":"../a"}' "line"
"$Z" run --mixture "$T/mix/none.json" --quiet >/dev/null 2>"$T/err"; rc=$?
check "a missing mixture file: exit 2 naming it ($rc)" '[[ $rc -eq 2 ]] && grep -q "none.json" "$T/err"'
# weights whose ratio the schedule cannot keep (issue 20 item 8: b was drawn
# 4 times in 4,000,000 and its weight printed as 0.0000)
"$Z" run --data a@1e300 --data b@1 --quiet --max-batches 1 >/dev/null 2>"$T/err"; rc=$?
check "weights 1e300 and 1 refused naming both parts and weights, exit 1 ($rc)" \
  '[[ $rc -eq 1 ]] && grep -qF "part '"'b'"' (weight 1) is 1e-300 of the mixture next to part '"'a'"' (weight 1e+300)" "$T/err"' ||
  cat "$T/err"
"$Z" run --data a@1 --data b@0.000001 --data c@0.5 "${common[@]}" --epoch-samples 100 > "$T/tiny.txt" 2>&1; rc=$?
check "a small exact weight runs and is printed with its digits, not 0.0000 ($rc)" \
  '[[ $rc -eq 0 ]] && grep -Eq "^ +b +6\.66666e-07 " "$T/tiny.txt"' || cat "$T/tiny.txt"
# a path with an '@' followed by something that is not a number is a path
mkdir -p "$T/x@y" && cp "$T/c"/*.zst "$T/x@y/"
"$Z" run --data "x@y" --data b --quiet --max-batches 1 >/dev/null 2>"$T/err"; rc=$?
check "a folder named x@y is a spec, not a weight ($rc)" '[[ $rc -eq 0 ]]'
"$Z" run --data "x@y@2" --data b --quiet --max-batches 1 >/dev/null 2>"$T/err"; rc=$?
check "x@y@2: the folder x@y with weight 2 ($rc)" '[[ $rc -eq 0 ]]'

# 4. one part is the plain dataset
"$Z" run --data a@0.3 --quiet --seed 11 --microbatch 10 --emit-digest "$T/p1.txt" > "$T/out1" 2>&1
"$Z" run a --quiet --seed 11 --microbatch 10 --emit-digest "$T/p2.txt" > /dev/null 2>&1
check "one --data part: the batches of the positional spec" '[[ -s "$T/p1.txt" ]] && cmp -s "$T/p1.txt" "$T/p2.txt"'
check "one part: no proportions printed" '! grep -q "mixture" "$T/out1"'

finish
