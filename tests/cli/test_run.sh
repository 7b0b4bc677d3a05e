#!/usr/bin/env bash
# test_run.sh ZEPHON - `zephon run` end to end:
#  1. digests identical across threads 1/2/4 and different parallelism;
#  2. --emit-ids: exactly once across ranks (world sizes 1..4), equal counts;
#  3. tokenized runs deterministic too;
#  4. bad settings and bad data give a clear error and a nonzero exit;
#  5. --doc-masking;
#  6. --balance.
set -u
Z=${1:?usage: test_run.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"

"$Z" gen --out "$T/ds" --shards 9 --samples-per-shard 150 --uneven --seed 7 >/dev/null || { echo "FAIL - gen"; exit 1; }
M="$T/ds/manifest.json"

# 1. determinism of record batches across threads and parallelism
ref=""
for cfg in "--threads 1" "--threads 2 --fetch-parallelism 2" "--threads 4 --fetch-parallelism 3 --map strip:4" \
           "--threads 2 --map strip:1 --chunk-samples 5" "--threads 4 --in-flight 40 --chunk-samples 1"; do
  extra=""; [[ "$cfg" == *"--map"* ]] || extra="--map strip:1"
  "$Z" run "$M" --quiet --seed 3 --microbatch 8 $cfg $extra --emit-digest "$T/d.txt" >/dev/null || bad "run $cfg"
  h=$(sha256sum < "$T/d.txt")
  [[ -z "$ref" ]] && ref=$h
  check "digest equal with $cfg" '[[ "$h" == "$ref" ]]'
done
"$Z" run "$M" --quiet --seed 3 --microbatch 8 --threads 2 --map strip:1 --prefetch 500:2 --emit-digest "$T/dp.txt" >/dev/null || bad "run --prefetch"
check "digest equal with --prefetch 500:2" '[[ "$(sha256sum < "$T/dp.txt")" == "$ref" ]]'
"$Z" run "$M" --quiet --prefetch 0 >/dev/null 2>&1; rc=$?
check "--prefetch 0 rejected" '[[ $rc -ne 0 ]]'
check "digest has one line per batch" '[[ $(wc -l < "$T/d.txt") -gt 10 ]]'

# 2. exactly once across ranks, equal counts, ids named shard:record
total=$(python3 -c "import json;print(sum(s['samples'] for s in json.load(open('$M'))['shards']))")
for W in 1 2 3 4; do
  rm -rf "$T/ids"
  for ((r=0; r<W; r++)); do
    "$Z" run "$M" --quiet --seed 5 --rank $r --world-size $W --threads 2 --emit-ids "$T/ids" >/dev/null || bad "run rank $r/$W"
  done
  counts=$(for ((r=0; r<W; r++)); do wc -l < "$T/ids/rank-$r.ids"; done | sort -u | wc -l)
  check "W=$W equal per-rank counts" '[[ $counts -eq 1 ]]'
  uniq=$(cat "$T"/ids/rank-*.ids | sort -u | wc -l)
  check "W=$W every sample delivered" '[[ $uniq -eq $total ]]'
  all=$(cat "$T"/ids/rank-*.ids | wc -l)
  per=$(( (total + W - 1) / W ))
  check "W=$W padding only the remainder" '[[ $all -eq $((per * W)) ]]'
done
check "ids look like shard:record" 'head -1 "$T/ids/rank-0.ids" | grep -Eq "^shard-[0-9]+\.jsonl\.zst:[0-9]+$"'

# RANK/WORLD_SIZE from the environment
rm -rf "$T/ids"
RANK=1 WORLD_SIZE=2 "$Z" run "$M" --quiet --emit-ids "$T/ids" >/dev/null
check "RANK/WORLD_SIZE env respected" '[[ -f "$T/ids/rank-1.ids" ]]'
rm -rf "$T/ids"
SLURM_PROCID=2 SLURM_NTASKS=3 "$Z" run "$M" --quiet --emit-ids "$T/ids" >/dev/null
check "SLURM_PROCID/SLURM_NTASKS respected" '[[ -f "$T/ids/rank-2.ids" ]]'

# 3. tokenized runs: deterministic across threads and parallelism
"$Z" run "$M" --quiet --tokenize gpt2:1 --threads 1 --seq-len 255 --microbatch 4 --emit-digest "$T/t1.txt" >/dev/null || bad "tokenize run 1"
"$Z" run "$M" --quiet --tokenize gpt2:3 --threads 2 --fetch-parallelism 2 --map strip:2 --seq-len 255 --microbatch 4 --emit-digest "$T/t2.txt" >/dev/null || bad "tokenize run 2"
"$Z" run "$M" --quiet --tokenize gpt2:4 --threads 4 --chunk-samples 7 --seq-len 255 --microbatch 4 --emit-digest "$T/t3.txt" >/dev/null || bad "tokenize run 3"
check "tokenized digests equal (threads 1 vs 4)" 'cmp -s "$T/t1.txt" "$T/t3.txt"'
check "tokenized digest: one line per batch" '[[ $(wc -l < "$T/t2.txt") -eq $(wc -l < "$T/t1.txt") ]]'

# observability from the command line
"$Z" run "$M" --quiet --threads 2 --observe=0 --json --metrics-out "$T/m.json" > "$T/obs.txt" || bad "run --observe"
check "--observe --json prints three snapshots and the summary as JSON lines" \
  'python3 -c "import json,sys; L=[json.loads(l) for l in open(\"$T/obs.txt\")]; s=[d.get(\"snapshot\") for d in L]; sys.exit(0 if s[:3]==[\"metrics\",\"fetch_timing\",\"prefetch_timing\"] and \"samples_per_s\" in L[-1] else 1)"'
check "--metrics-out writes one document whose counts match the run" \
  'python3 -c "import json,sys; d=json.load(open(\"$T/m.json\")); m=d[\"metrics\"]; f=d[\"fetch_timing\"]; sys.exit(0 if m[\"samples\"]==$total and f[\"records\"]==$total and \"prefetch_timing\" in d else 1)"'
"$Z" run "$M" --quiet --threads 2 --observe=0 > "$T/obs2.txt" || bad "run --observe table"
check "--observe prints the operator table" 'grep -q "operator" "$T/obs2.txt" && grep -q "tokenize\|fetch" "$T/obs2.txt" && grep -q "stall" "$T/obs2.txt"'

# 4. errors
"$Z" run "$T/nope/*.jsonl" --quiet >/dev/null 2>"$T/err"; rc=$?
check "missing shards: nonzero exit" '[[ $rc -ne 0 ]]'
check "missing shards: message names the pattern" 'grep -q "nope" "$T/err"'
printf '{"text":"a"}\n{"text":"b"}\n{"text": broken\n' > "$T/bad.jsonl"
"$Z" run "$T/bad.jsonl" --quiet >/dev/null 2>"$T/err"; rc=$?
check "bad record: nonzero exit" '[[ $rc -ne 0 ]]'
check "bad record: names shard and line" 'grep -q "bad.jsonl" "$T/err" && grep -q "line 3" "$T/err"'
"$Z" run "$T/bad.jsonl" --quiet --skip-bad-records >"$T/out" 2>"$T/err"; rc=$?
check "skip policy: exit 0" '[[ $rc -eq 0 ]]'
check "skip policy: skip counted" 'grep -q "skipped 1" "$T/out"'
"$Z" run "$M" --quiet --rank 3 --world-size 2 >/dev/null 2>"$T/err"; rc=$?
check "rank >= world size rejected" '[[ $rc -ne 0 ]] && grep -q "world size" "$T/err"'
"$Z" run "$M" --quiet --microbatch 0 >/dev/null 2>"$T/err"; rc=$?
check "microbatch 0 rejected" '[[ $rc -ne 0 ]]'

printf '{"text":"ok"}\n{"text":"bad \xff\xfe bytes"}\n' > "$T/utf8.jsonl"
"$Z" run "$T/utf8.jsonl" --quiet >/dev/null 2>"$T/err"; rc=$?
check "invalid UTF-8: nonzero exit, names shard and line" '[[ $rc -ne 0 ]] && grep -q "utf8.jsonl" "$T/err" && grep -q "line 2" "$T/err" && grep -qi "utf" "$T/err"'
python3 -c "import sys;d=open('$T/ds/shard-00000.jsonl.zst','rb').read();open('$T/trunc.jsonl.zst','wb').write(d[:len(d)//2])"
"$Z" run "$T/trunc.jsonl.zst" --quiet >/dev/null 2>"$T/err"; rc=$?
check "truncated zstd: nonzero exit, names shard" '[[ $rc -ne 0 ]] && grep -q "trunc.jsonl.zst" "$T/err" && grep -qi "truncated" "$T/err"'
: > "$T/empty.jsonl"
"$Z" run "$T/empty.jsonl" --quiet >/dev/null 2>"$T/err"; rc=$?
check "empty shard: nonzero exit, names shard" '[[ $rc -ne 0 ]] && grep -q "empty.jsonl" "$T/err"'

# 5. --doc-masking (docs/packing.md): reported, deterministic across threads,
#    in the digests, refused without tokenize or with a bad value
dm=(--quiet --seed 3 --tokenize gpt2 --seq-len 63 --microbatch 4)
"$Z" run "$M" "${dm[@]}" --threads 1 --emit-digest "$T/dm0.txt" >/dev/null || bad "run without --doc-masking"
"$Z" run "$M" "${dm[@]}" --threads 1 --doc-masking --emit-digest "$T/dm1.txt" >"$T/out" || bad "run --doc-masking"
"$Z" run "$M" "${dm[@]}" --threads 4 --doc-masking --emit-digest "$T/dm2.txt" >/dev/null || bad "run --doc-masking threads 4"
"$Z" run "$M" "${dm[@]}" --threads 2 --doc-masking=continue --emit-digest "$T/dm3.txt" --json >"$T/json" || bad "run --doc-masking=continue"
check "doc masking: summary line" 'grep -Eq "doc masking: [0-9]+ documents in [0-9]+ filled rows .*the longest [0-9]+" "$T/out"'
check "doc masking: equal digests with 1 and 4 threads" 'cmp -s "$T/dm1.txt" "$T/dm2.txt"'
check "doc masking: the digests cover the outputs" '! cmp -s "$T/dm0.txt" "$T/dm1.txt" && ! cmp -s "$T/dm1.txt" "$T/dm3.txt"'
check "doc masking: --json" 'python3 -c "import json,sys; d=json.load(open(sys.argv[1]))[\"doc_masking\"]; assert d[\"documents\"] > 0 and 0 < d[\"max_seqlen\"] <= 63" "$T/json"'
"$Z" run "$M" --quiet --doc-masking >/dev/null 2>"$T/err"; rc=$?
check "doc masking without --tokenize: exit 1, says why" '[[ $rc -eq 1 ]] && grep -q "need a tokenize operator" "$T/err"'
"$Z" run "$M" --quiet --tokenize gpt2 --doc-masking=sideways >/dev/null 2>"$T/err"; rc=$?
check "--doc-masking=sideways: usage error" '[[ $rc -eq 2 ]] && grep -q "restart or =continue" "$T/err"'

# 6. --balance K (docs/packing.md): reported with a lower max/mean after,
#    deterministic across threads, --save-state inside a window resumes to
#    the same digests, refused without tokenize or with a bad value
bl=(--quiet --seed 3 --tokenize gpt2 --seq-len 63 --microbatch 4 --pack bestfit:16 --doc-masking)
"$Z" run "$M" "${bl[@]}" --threads 1 --balance 3 --emit-digest "$T/b1.txt" --json >"$T/json" || bad "run --balance"
"$Z" run "$M" "${bl[@]}" --threads 4 --balance 3 --emit-digest "$T/b2.txt" >/dev/null || bad "run --balance threads 4"
check "balance: equal digests with 1 and 4 threads" 'cmp -s "$T/b1.txt" "$T/b2.txt"'
check "balance: --json before > after >= 1" 'python3 -c "import json,sys; d=json.load(open(sys.argv[1]))[\"balance\"]; assert d[\"windows\"] > 0 and d[\"imbalance_before\"] > d[\"imbalance_after\"] >= 1, d" "$T/json"'
"$Z" run "$M" "${bl[@]}" --balance 3 --max-batches 7 --save-state "$T/b.state" >/dev/null || bad "run --balance --save-state"
"$Z" run "$M" "${bl[@]}" --balance 3 --resume "$T/b.state" --emit-digest "$T/b3.txt" >/dev/null || bad "run --balance --resume"
check "balance: state inside a window (7 = 2 x 3 + 1) names it" 'grep -q "\"balance_done\": 1" "$T/b.state"'
check "balance: resumed digests = the rest of the uninterrupted run" 'cmp -s <(tail -n +8 "$T/b1.txt") "$T/b3.txt"'
"$Z" run "$M" "${bl[@]}" --balance 4 --resume "$T/b.state" >/dev/null 2>"$T/err"; rc=$?
check "balance: another window refused" '[[ $rc -ne 0 ]] && grep -q "balance" "$T/err"'
"$Z" run "$M" --quiet --balance 4 >/dev/null 2>"$T/err"; rc=$?
check "balance without --tokenize: exit 1, says why" '[[ $rc -eq 1 ]] && grep -q "needs a tokenize operator" "$T/err"'
"$Z" run "$M" --quiet --tokenize gpt2 --balance 99999 >/dev/null 2>"$T/err"; rc=$?
check "--balance 99999: usage error" '[[ $rc -eq 2 ]] && grep -q "balance" "$T/err"'

finish
