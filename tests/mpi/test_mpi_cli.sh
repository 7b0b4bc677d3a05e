#!/usr/bin/env bash
# test_mpi_cli.sh ZEPHON MPIRUN - `zephon run` under mpirun (the MPI path
# is taken automatically):
#  1. 1..4 ranks: exactly once across ranks, equal counts, sample ids
#     naming shards as the manifest does, the report in four formats, its
#     totals equal to the sum of the ranks' rows;
#  2. a slow rank (--fetch-delay-us on one rank, MPMD) is named as the
#     straggler and no other rank is;
#  3. a rank given a different manifest: every rank fails with a message
#     naming the ranks, no hang;
#  4. token packing: every rank delivers the same number of batches;
#  5. --report without mpirun: a world of one without MPI (never
#     initialised), the samples and the report of mpirun -np 1;
#  6. a corrupt shard: the rank that meets it stops every rank, and every
#     rank fails with the same message naming that rank and the shard, no hang;
#  7. a shard changed after `zephon index --hash` (one letter of a text
#     value: still valid JSON, same size): every rank fails with the hash
#     mismatch, naming the rank that loaded it and the shard, no hang;
#  8. a report window that fails on one rank only (injected): every rank
#     stops starting windows at the same step (a vote carried by the
#     lock-step agreement), the run completes and writes its final report,
#     no hang;
#  9. accelerator utilisation: in the slow-rank run of 2 the job fails the
#     90% AU threshold (the slow rank waits for data, the others wait for
#     it), each rank's AU is 1 - stall - sync over the time since its first
#     batch; a singleton run whose loading keeps up with a 20 ms step
#     passes it.
set -u
Z=${1:?usage: test_mpi_cli.sh ZEPHON MPIRUN}
MPIRUN=${2:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
. "$(dirname "$0")/../testlib.sh"
run() { timeout 60 "$MPIRUN" --oversubscribe --bind-to none "$@"; }

"$Z" gen --out "$T/a" --shards 9 --samples-per-shard 150 --uneven --seed 7 >/dev/null || { echo "FAIL - gen"; exit 1; }
"$Z" gen --out "$T/b" --shards 4 --samples-per-shard 50 --seed 8 >/dev/null || { echo "FAIL - gen"; exit 1; }
A="$T/a/manifest.json"; B="$T/b/manifest.json"
total=$(python3 -c "import json;print(sum(s['samples'] for s in json.load(open('$A'))['shards']))")

# 1. exactly once + the report
for W in 1 2 3 4; do
  run -np $W "$Z" run "$A" --quiet --seed 5 --threads 1 --microbatch 16 \
      --emit-ids "$T/ids$W" --report "$T/rep$W" > "$T/out$W" 2> "$T/err$W"
  rc=$?
  check "W=$W runs (rc $rc)" '[[ $rc -eq 0 ]]'
  [[ $rc -eq 0 ]] || { cat "$T/err$W"; continue; }
  counts=$(for ((r=0; r<W; r++)); do wc -l < "$T/ids$W/rank-$r.ids"; done | sort -u | wc -l)
  check "W=$W equal per-rank counts" '[[ $counts -eq 1 ]]'
  uniq=$(cat "$T"/ids$W/rank-*.ids | sort -u | wc -l)
  check "W=$W every sample delivered ($uniq of $total)" '[[ $uniq -eq $total ]]'
  # every rank names the shards as the manifest does (not by rank 0's paths)
  check "W=$W ids use the manifest's shard names" '! grep -qv "^shard-[0-9]*\.jsonl\.zst:[0-9]*$" "$T"/ids$W/rank-*.ids'
  all=$(cat "$T"/ids$W/rank-*.ids | wc -l)
  check "W=$W fewer than W repeats ($all - $total)" '[[ $all -ge $total && $((all - total)) -lt $W ]]'
  for f in report.txt report.json report.csv report.html windows.csv; do
    check "W=$W wrote $f" '[[ -s "$T/rep$W/$f" ]]'
  done
  check "W=$W report totals and ranks" "python3 - '$T/rep$W/report.json' $W $all <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); W = int(sys.argv[2]); n = int(sys.argv[3])
assert d['header']['ranks'] == W and len(d['ranks']) == W, d['header']
assert [r['rank'] for r in d['ranks']] == list(range(W))
for k in ('samples', 'batches', 'records', 'bytes_fetched', 'bytes_read', 'shards_opened'):
    assert d['totals'][k] == sum(r[k] for r in d['ranks']), k
assert d['totals']['samples'] == n, (d['totals']['samples'], n)
assert d['header']['dataset']['samples'] > 0
assert d['verdict'].startswith('verdict: ')
assert len(d['windows']['fetch_per_batch_ms']) == W
EOF"
  rows=$(($(wc -l < "$T/rep$W/report.csv") - 1))
  check "W=$W csv has one row per rank" '[[ $rows -eq $W ]]'
  check "W=$W html is self-contained" '! grep -Eq "<script|<link|src=|@import" "$T/rep$W/report.html" && grep -q "<svg" "$T/rep$W/report.html"'
  check "W=$W text report printed by rank 0 only" '[[ $(grep -c "^verdict: " "$T/out$W") -eq 1 ]]'
done

# 2. a slow rank is named, and only it
common=(--quiet --threads 1 --microbatch 4 --chunk-samples 4 --prefetch-batches 8 --step-time 0.004 --max-batches 30 --report-every 5)
run -np 2 "$Z" run "$A" "${common[@]}" --report "$T/slow" : \
    -np 1 "$Z" run "$A" "${common[@]}" --report "$T/slow" --fetch-delay-us 25000 > "$T/slow.out" 2> "$T/slow.err"
rc=$?
check "slow-rank run (rc $rc)" '[[ $rc -eq 0 ]]'
check "the slow rank (2) is the only straggler" "python3 - '$T/slow/report.json' <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
names = [s['rank'] for s in d['stragglers']]
assert names == [2], (names, d['verdict'])
s = d['stragglers'][0]
assert 'ratio' in s['reasons'] and 'stall' in s['reasons'], s
assert 'straggler: rank 2' in d['verdict'], d['verdict']
EOF" || cat "$T/slow/report.txt"
check "the text report names it" 'grep -q "^  rank 2 (" "$T/slow/report.txt"'

# 3. a rank given a different manifest: all fail, no hang
run -np 2 "$Z" run "$A" --quiet : -np 1 "$Z" run "$B" --quiet > "$T/mm.out" 2> "$T/mm.err"
rc=$?
check "different manifest fails (rc $rc, not a timeout)" '[[ $rc -ne 0 && $rc -ne 124 ]]'
n=$(grep -c "ranks disagree: .*rank 2: .*$B" "$T/mm.err")
check "every rank names rank 2 and its manifest ($n lines)" '[[ $n -eq 3 ]]' || cat "$T/mm.err"

# 4. token packing: the same number of batches on every rank
run -np 3 "$Z" run "$A" --quiet --threads 1 --tokenize gpt2 --seq-len 64 --microbatch 2 --json \
    > "$T/tok.out" 2> "$T/tok.err"
rc=$?
check "token run (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/tok.err"
nb=$(grep -o '"batches":[0-9]*' "$T/tok.out" | sort -u | wc -l)
nr=$(grep -c '"batches":' "$T/tok.out")
check "token packing: 3 ranks, one batch count" '[[ $nr -eq 3 && $nb -eq 1 ]]' || cat "$T/tok.out"
# the same ranks run alone (no MPI) deliver different counts: all stopped at the shortest
solo=$(for r in 0 1 2; do "$Z" run "$A" --quiet --threads 1 --tokenize gpt2 --seq-len 64 --microbatch 2 \
         --json --rank $r --world-size 3 | grep -o '"batches":[0-9]*' | cut -d: -f2; done | sort -n)
lo=$(head -1 <<<"$solo"); distinct=$(sort -u <<<"$solo" | wc -l)
got=$(grep -o '"batches":[0-9]*' "$T/tok.out" | head -1 | cut -d: -f2)
check "token packing: alone the ranks differ ($distinct counts), together they stop at the shortest ($got = $lo)" \
  '[[ $distinct -gt 1 && "$got" == "$lo" ]]'

# 5. --report without a launcher: a world of one WITHOUT MPI
# (zp_mpi_create_local). MPI is never initialised: Open MPI pointed at a
# folder with no components, where any MPI_Init fails (opal_init), does not
# matter. The same samples, in the same order, and the same report as
# `mpirun -np 1` (case 1, W=1).
OMPI_MCA_mca_base_component_path=/nonexistent timeout 60 "$Z" run "$A" --quiet --seed 5 \
  --threads 1 --microbatch 16 --emit-ids "$T/ids-single" --report "$T/single" > "$T/single.out" 2>&1
rc=$?
check "singleton --report, MPI never initialised (rc $rc)" '[[ $rc -eq 0 && -s "$T/single/report.json" ]]' || cat "$T/single.out"
check "singleton: the samples of mpirun -np 1, in its order" 'cmp -s "$T/ids1/rank-0.ids" "$T/ids-single/rank-0.ids"'
check "singleton: the report of mpirun -np 1 (header, totals, windows)" "python3 - '$T/rep1/report.json' '$T/single/report.json' <<'EOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for k in ('ranks', 'nodes', 'settings', 'dataset', 'criterion', 'rank_host'):
    assert a['header'][k] == b['header'][k], (k, a['header'][k], b['header'][k])
for k in ('samples', 'batches', 'records', 'bytes_read', 'shards_opened'):
    assert a['totals'][k] == b['totals'][k], k
assert len(a['windows']['t_end_s']) == len(b['windows']['t_end_s'])
assert b['verdict'].startswith('verdict: ') and b['partial'] is False
EOF"
for f in report.txt report.json report.csv report.html windows.csv; do
  check "singleton wrote $f" '[[ -s "$T/single/$f" ]]'
done

# 6. a corrupt shard (its zstd frame header overwritten, same size): every
# rank fails with "rank N: shard '...'" for one N, within the timeout
"$Z" gen --out "$T/c" --shards 6 --samples-per-shard 100 --seed 3 >/dev/null || { echo "FAIL - gen"; exit 1; }
printf 'XXXX' | dd of="$T/c/shard-00003.jsonl.zst" bs=1 seek=0 conv=notrunc status=none
run -np 3 "$Z" run "$T/c/manifest.json" --quiet --threads 1 > "$T/bad.out" 2> "$T/bad.err"
rc=$?
check "corrupt shard fails (rc $rc, not a timeout)" '[[ $rc -ne 0 && $rc -ne 124 ]]'
lines=$(grep -c "^zephon run: .*: rank [0-9]*: shard 'shard-00003.jsonl.zst'" "$T/bad.err")
named=$(grep -o "^zephon run: [^:]*: rank [0-9]*:" "$T/bad.err" | sort -u | wc -l)
check "every rank names the failing rank and the shard ($lines lines, $named distinct)" \
  '[[ $lines -eq 3 && $named -eq 1 ]]' || cat "$T/bad.err"

# 7. a content hash mismatch under MPI: the manifest's xxh64 reaches every
# rank (rank 0 broadcasts the dataset) and every load checks it
"$Z" gen --out "$T/h" --shards 6 --samples-per-shard 100 --seed 3 --format jsonl >/dev/null || { echo "FAIL - gen"; exit 1; }
rm -f "$T/h/manifest.json"
"$Z" index --hash -o "$T/h/manifest.json" "$T/h" >/dev/null || { echo "FAIL - index --hash"; exit 1; }
run -np 3 "$Z" run "$T/h/manifest.json" --quiet --threads 1 > "$T/hash0.out" 2> "$T/hash0.err"
rc=$?
check "hashed dataset, unchanged: runs (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/hash0.err"
python3 - "$T/h/shard-00003.jsonl" <<'PY' || { echo "FAIL - flip"; exit 1; }
import json, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
i = b.index(b'"text": "') + 9          # inside the first record's text value
while not chr(b[i]).isalpha(): i += 1
b[i] = ord('Q') if b[i] != ord('Q') else ord('R')
open(p, 'wb').write(b)
for line in b.decode().splitlines(): json.loads(line)   # still decodable
PY
run -np 3 "$Z" run "$T/h/manifest.json" --quiet --threads 1 > "$T/hash.out" 2> "$T/hash.err"
rc=$?
check "changed shard fails (rc $rc, not a timeout)" '[[ $rc -ne 0 && $rc -ne 124 ]]'
lines=$(grep -c "^zephon run: .*: rank [0-9]*: shard 'shard-00003.jsonl': content hash mismatch" "$T/hash.err")
named=$(grep -o "^zephon run: [^:]*: rank [0-9]*:" "$T/hash.err" | sort -u | wc -l)
check "every rank says hash mismatch, naming the rank and the shard ($lines lines, $named distinct)" \
  '[[ $lines -eq 3 && $named -eq 1 ]]' || cat "$T/hash.err"

# 8. a rank-local report window failure (ZEPHON_TEST_REPORT_FAIL_RANK)
"$Z" gen --out "$T/w" --shards 4 --samples-per-shard 200 --seed 3 >/dev/null || { echo "FAIL - gen"; exit 1; }
for fr in 0 2; do
  rm -rf "$T/wrep"
  ZEPHON_TEST_REPORT_FAIL_RANK=$fr run -x ZEPHON_TEST_REPORT_FAIL_RANK -np 3 "$Z" run "$T/w/manifest.json" \
    --quiet --threads 1 --microbatch 2 --report-every 4 --report "$T/wrep" > "$T/win.out" 2> "$T/win.err"
  rc=$?
  check "report window failing on rank $fr only: the run completes (rc $rc, not a timeout)" '[[ $rc -eq 0 ]]' || cat "$T/win.err"
  check "report window failing on rank $fr: said once, by that rank" \
    '[[ $(grep -c "report window: failure injected" "$T/win.err") -eq 1 ]] && grep -q "^zephon run: rank $fr: report window: failure injected" "$T/win.err"'
  check "report window failing on rank $fr: final report written, windows stopped early" \
    'python3 -c "import json,sys; d=json.load(open(\"$T/wrep/report.json\")); w=len(d[\"windows\"][\"t_end_s\"]); sys.exit(0 if d[\"kind\"]==\"final\" and 1 <= w < 10 else 1)"'
done

# 9. accelerator utilisation (MLPerf Storage's AU)
check "AU: the slow-rank job fails the 90% threshold, each rank's AU from its times" \
  "python3 - '$T/slow/report.json' <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
a = d['accelerator_utilisation']
assert a['passes'] is False and a['threshold'] == 0.9 and a['ranks'] == 3, a
aus = [r['au'] for r in d['ranks']]
assert abs(a['job'] - sum(aus) / 3) < 1e-9, (a, aus)
assert aus[2] < 0.9, aus
for r in d['ranks']:
    active = r['wall_s'] - r['first_batch_s']
    want = max(0.0, active - r['stall_s'] - r['sync_s']) / active
    assert abs(r['au'] - want) < 1e-6, (r['rank'], r['au'], want)
EOF" || cat "$T/slow/report.txt"
check "AU: the text report says it fails" 'grep -q "): fails the 90.0% AU threshold$" "$T/slow/report.txt"'
"$Z" run "$A" --quiet --threads 1 --microbatch 4 --prefetch-batches 8 --step-time 0.02 --max-batches 30 \
  --report "$T/au" > "$T/au.out" 2>&1
rc=$?
check "AU: a run whose loading keeps up with its 20 ms step passes (rc $rc)" \
  "python3 - '$T/au/report.json' <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
a = d['accelerator_utilisation']
assert a['passes'] is True and a['ranks'] == 1 and a['job'] >= 0.9, a
assert d['ranks'][0]['au'] == a['job'], d['ranks'][0]
EOF" || cat "$T/au.out" "$T/au/report.txt"
check "AU: the text report says it passes" 'grep -q "): passes the 90.0% AU threshold$" "$T/au/report.txt"'

finish
