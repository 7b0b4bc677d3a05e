#!/usr/bin/env bash
# test_state_cli.sh ZEPHON - checkpoints from the command line, on a 3-part
# mixture with shuffle, in record mode and with token concat packing:
#  1. 20 batches with --save-state --save-every 10, then --resume for the
#     rest: the two runs' --emit-digest and --emit-ids, concatenated, are
#     one uninterrupted run's (other thread counts in the resumed run);
#  2. a run killed (SIGKILL) after its first periodic state: resuming from
#     that state continues at a multiple of --save-every, and what was
#     delivered up to it plus the resumed run is the uninterrupted run;
#  3. a run stopped by SIGTERM writes the state after its last batch:
#     resuming gives the rest exactly (nothing repeated or lost);
#  4. a state from other settings (seq_len, seed, weights) is refused
#     naming the setting; an unreadable or broken state names the file;
#  5. --skip-batches 25-29 on a resumed run: those batches are absent and
#     every other one is identical;
#  6. the state file is written atomically (no temporary file left); an
#     unwritable path is exit 1 naming it; bad option values are exit 2;
#  7. another spelling of the same local files (absolute, a/../a, a copy in
#     another folder) resumes; another dataset is refused saying why;
#  8. --seed 2^64 - 1 and 2^63: saved and resumed exactly (the settings'
#     seed is a decimal string from 2^63 on, an integer below).
set -u
Z=$(realpath "${1:?usage: test_state_cli.sh PATH_TO_ZEPHON}")
. "$(dirname "$0")/../testlib.sh"
export XDG_CACHE_HOME="$T/cache"

"$Z" gen --out "$T/a" --shards 4 --samples-per-shard 60 --seed 1 >/dev/null || { echo "FAIL - gen a"; exit 1; }
"$Z" gen --out "$T/b" --shards 3 --samples-per-shard 30 --seed 2 >/dev/null || { echo "FAIL - gen b"; exit 1; }
"$Z" gen --out "$T/c" --shards 2 --samples-per-shard 15 --seed 3 >/dev/null || { echo "FAIL - gen c"; exit 1; }
mix=(--data "$T/a@0.6" --data "$T/b@0.3" --data "$T/c@0.1" --seed 9 --quiet)
rec=("${mix[@]}" --microbatch 8 --epoch-samples 320 --epochs 1)       # 40 batches
tok=("${mix[@]}" --tokenize gpt2:2 --pack concat --seq-len 63 --microbatch 4 --epoch-samples 300 --epochs 1)

# strip the ids' folder differences: one run's lines, in stream order
ids() { cat "$1"/rank-0.ids; }

for mode in rec tok; do
  if [[ $mode == rec ]]; then args=("${rec[@]}"); else args=("${tok[@]}"); fi
  d="$T/$mode"; mkdir -p "$d"
  # the uninterrupted run
  "$Z" run "${args[@]}" --threads 2 --emit-digest "$d/full.dig" --emit-ids "$d/full.ids" \
    >/dev/null 2>"$d/err"; rc=$?
  check "$mode: the uninterrupted run (rc $rc)" '[[ $rc -eq 0 && $(wc -l < "$d/full.dig") -ge 30 ]]' || cat "$d/err"
  n=$(wc -l < "$d/full.dig")

  # 1. save at 10 and 20, stop at 20, resume
  "$Z" run "${args[@]}" --threads 1 --save-state "$d/s.json" --save-every 10 --max-batches 20 \
    --emit-digest "$d/p1.dig" --emit-ids "$d/p1.ids" >/dev/null 2>"$d/err"; rc=$?
  check "$mode: first 20 batches with --save-state (rc $rc)" '[[ $rc -eq 0 && -s "$d/s.json" ]]' || cat "$d/err"
  check "$mode: the state file is JSON with a version" \
    'python3 -c "import json,sys; d=json.load(open(\"$d/s.json\")); sys.exit(0 if d.get(\"version\")==1 else 1)"'
  check "$mode: no temporary state file left" '[[ -z $(ls "$d" | grep tmp) ]]'
  "$Z" run "${args[@]}" --threads 4 --fetch-parallelism 2 --resume "$d/s.json" \
    --emit-digest "$d/p2.dig" --emit-ids "$d/p2.ids" >/dev/null 2>"$d/err"; rc=$?
  check "$mode: --resume for the rest (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$d/err"
  check "$mode: first run + resumed run = the uninterrupted run (digests, $n batches)" \
    'cat "$d/p1.dig" "$d/p2.dig" | cmp -s - "$d/full.dig"'
  check "$mode: first run + resumed run = the uninterrupted run (sample ids)" \
    'cat "$d/p1.ids/rank-0.ids" "$d/p2.ids/rank-0.ids" | cmp -s - "$d/full.ids/rank-0.ids"'

  # 5. skipping 25-29 on the resumed run
  "$Z" run "${args[@]}" --threads 2 --resume "$d/s.json" --skip-batches 25-29 \
    --emit-digest "$d/sk.dig" >/dev/null 2>"$d/err"; rc=$?
  check "$mode: --skip-batches 25-29 on a resumed run (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$d/err"
  check "$mode: batches 25-29 absent, every other batch identical" \
    '[[ -s "$d/sk.dig" && $(wc -l < "$d/sk.dig") -eq $(($(wc -l < "$d/p2.dig") - 5)) ]] && awk "\$1 < 25 || \$1 > 29" "$d/p2.dig" | cmp -s - "$d/sk.dig"'

  # 2. killed after the first periodic state
  rm -f "$d/k.json"
  "$Z" run "${args[@]}" --threads 1 --save-state "$d/k.json" --save-every 10 --step-time 0.1 \
    --emit-digest "$d/k1.dig" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 300); do [[ -s "$d/k.json" ]] && break; sleep 0.02; done
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  check "$mode: a periodic state was written before the kill" '[[ -s "$d/k.json" ]]'
  "$Z" run "${args[@]}" --threads 2 --resume "$d/k.json" --emit-digest "$d/k2.dig" >/dev/null 2>"$d/err"; rc=$?
  first=$(head -1 "$d/k2.dig" | awk '{print $1}')
  check "$mode: resumed after the kill at batch $first, a multiple of 10 (rc $rc)" \
    '[[ $rc -eq 0 && -n "$first" && $((first % 10)) -eq 0 && $first -gt 0 ]]'
  check "$mode: the batches before it + the resumed run = the uninterrupted run" \
    '{ head -n "$first" "$d/full.dig"; cat "$d/k2.dig"; } | cmp -s - "$d/full.dig"'

  # 3. SIGTERM: the state after the last delivered batch
  rm -f "$d/t.json"
  # (--observe prints, flushed, as batches are delivered: the run is under way)
  "$Z" run "${args[@]}" --threads 1 --save-state "$d/t.json" --step-time 0.1 --observe=0.2 \
    --emit-digest "$d/t1.dig" >"$d/t.out" 2>&1 &
  pid=$!
  for _ in $(seq 500); do grep -Eq "\] [1-9][0-9]* batches" "$d/t.out" 2>/dev/null && break; sleep 0.02; done
  kill -TERM $pid; wait $pid; rc=$?
  check "$mode: SIGTERM: exit 143 and a state written ($rc)" '[[ $rc -eq 143 && -s "$d/t.json" ]]'
  "$Z" run "${args[@]}" --threads 2 --resume "$d/t.json" --emit-digest "$d/t2.dig" >/dev/null 2>"$d/err"; rc=$?
  check "$mode: SIGTERM: delivered + resumed = the uninterrupted run (rc $rc, $(wc -l < "$d/t1.dig") before)" \
    'cat "$d/t1.dig" "$d/t2.dig" | cmp -s - "$d/full.dig"'
done

# 4. a state from other settings is refused, naming the setting
S="$T/tok/s.json"
"$Z" run "${tok[@]}" --resume "$S" --seq-len 127 >/dev/null 2>"$T/err"; rc=$?
check "another seq_len: refused, exit 1, naming seq_len ($rc)" '[[ $rc -eq 1 ]] && grep -q "seq_len" "$T/err" && grep -qF "$S" "$T/err"'
"$Z" run "${tok[@]}" --resume "$S" --seed 10 >/dev/null 2>"$T/err"; rc=$?
check "another seed: refused, exit 1, naming seed ($rc)" '[[ $rc -eq 1 ]] && grep -q "seed" "$T/err"'
"$Z" run --data "$T/a@0.5" --data "$T/b@0.4" --data "$T/c@0.1" --seed 9 --quiet --tokenize gpt2:2 \
  --pack concat --seq-len 63 --microbatch 4 --epoch-samples 300 --epochs 1 --resume "$S" >/dev/null 2>"$T/err"; rc=$?
# (other weights are a new weight schedule since issue 22: the state resumes, the new
# weights from the draw past what it delivered, docs/mixtures.md; test_schedule_cli.sh)
check "other weights: resumed as a new schedule ($rc)" '[[ $rc -eq 0 ]]'
"$Z" run "${rec[@]}" --resume "$S" >/dev/null 2>"$T/err"; rc=$?
check "a token-mode state in record mode: refused, exit 1 ($rc)" '[[ $rc -eq 1 ]] && grep -qF "$S" "$T/err"'
"$Z" run "${rec[@]}" --resume "$T/none.json" >/dev/null 2>"$T/err"; rc=$?
check "a missing state: exit 1 naming the file ($rc)" '[[ $rc -eq 1 ]] && grep -q "none.json" "$T/err"'
echo '{"version": 1, "seed": ' > "$T/broken.json"
"$Z" run "${rec[@]}" --resume "$T/broken.json" >/dev/null 2>"$T/err"; rc=$?
check "a broken state: exit 1 naming the file ($rc)" '[[ $rc -eq 1 ]] && grep -q "broken.json" "$T/err"'

# 7. another spelling of the same local files resumes (issue 20 item 7): a
#    folder without a manifest, saved as ./data/x, resumed as $PWD/data/x,
#    data/../data/x and a copy in another folder; another dataset is
#    refused with a hint at what the fingerprint covers
mkdir -p "$T/sp/data/x" "$T/sp/copy/x" && cp "$T"/b/*.zst "$T/sp/data/x/" && cp "$T"/b/*.zst "$T/sp/copy/x/"
sp=(--seed 4 --quiet --microbatch 5 --epochs 1)
(cd "$T/sp" && "$Z" run ./data/x "${sp[@]}" --emit-digest full.dig >/dev/null 2>&1 &&
  "$Z" run ./data/x "${sp[@]}" --max-batches 7 --save-state s.json --emit-digest p1.dig >/dev/null 2>err); rc=$?
check "spelling: saved with ./data/x (rc $rc)" '[[ $rc -eq 0 && -s "$T/sp/s.json" ]]' || cat "$T/sp/err"
for spec in "$T/sp/data/x" "data/../data/x" "data/x/" "copy/x"; do
  (cd "$T/sp" && "$Z" run "$spec" "${sp[@]}" --resume s.json --emit-digest p2.dig >/dev/null 2>err); rc=$?
  check "spelling: resumed as '$spec', the rest of the run (rc $rc)" \
    '[[ $rc -eq 0 ]] && cat "$T/sp/p1.dig" "$T/sp/p2.dig" | cmp -s - "$T/sp/full.dig"' || cat "$T/sp/err"
done
(cd "$T/sp" && "$Z" run "$T/c" "${sp[@]}" --resume s.json >/dev/null 2>err); rc=$?
check "spelling: another dataset refused, saying what the fingerprint covers ($rc)" \
  '[[ $rc -eq 1 ]] && grep -q "dataset = " "$T/sp/err" && grep -q "file names, without their folders" "$T/sp/err"'

# 8. seeds from 2^63 on: the settings' seed was written as a bare integer
#    that no JSON reader takes ("settings: not JSON: too big integer"); it is
#    a decimal string there as at the top level, and below 2^63 still an
#    integer (states saved before read the same)
for seed in 18446744073709551615 9223372036854775808; do
  bs=("$T/b" --seed $seed --quiet --microbatch 5 --epochs 1)
  "$Z" run "${bs[@]}" --emit-digest "$T/bfull.dig" >/dev/null 2>&1
  "$Z" run "${bs[@]}" --max-batches 4 --save-state "$T/big.json" --emit-digest "$T/b1.dig" >/dev/null 2>"$T/err"; rc=$?
  check "--seed $seed: the state is saved (rc $rc)" '[[ $rc -eq 0 ]] && grep -qF "\"seed\": \"$seed\"" "$T/big.json"' || cat "$T/err"
  "$Z" run "${bs[@]}" --resume "$T/big.json" --emit-digest "$T/b2.dig" >/dev/null 2>"$T/err"; rc=$?
  check "--seed $seed: resumed, the rest of the run (rc $rc)" \
    '[[ $rc -eq 0 ]] && cat "$T/b1.dig" "$T/b2.dig" | cmp -s - "$T/bfull.dig"' || cat "$T/err"
done
"$Z" run "${bs[@]}" --seed 9223372036854775807 --resume "$T/big.json" >/dev/null 2>"$T/err"; rc=$?
check "a seed of 2^63 - 1 against a state of 2^63: refused naming the seed ($rc)" '[[ $rc -eq 1 ]] && grep -q "seed" "$T/err"'
"$Z" run "$T/b" --seed 9223372036854775807 --quiet --microbatch 5 --max-batches 1 --save-state "$T/s63.json" >/dev/null 2>&1
check "a seed of 2^63 - 1 is still a JSON integer in both places" \
  '[[ $(grep -c "\"seed\": 9223372036854775807," "$T/s63.json") -eq 2 ]]'
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['seed']='5'; json.dump(d, open(sys.argv[1],'w'))" "$T/big.json"
"$Z" run "${bs[@]}" --resume "$T/big.json" >/dev/null 2>"$T/err"; rc=$?
check "the top-level seed edited against the settings' string seed: refused ($rc)" \
  '[[ $rc -eq 1 ]] && grep -qF "seed: 5, but the settings'"'"' seed is 9223372036854775808" "$T/err"' || cat "$T/err"

# 6. unwritable path, bad values
"$Z" run "${rec[@]}" --max-batches 3 --save-state "$T/no/such/dir/s.json" >/dev/null 2>"$T/err"; rc=$?
check "unwritable state path: exit 1 naming it ($rc)" '[[ $rc -eq 1 ]] && grep -q "no/such/dir/s.json" "$T/err"'
"$Z" run "${rec[@]}" --save-every 2 --save-state "$T/no/such/dir/s.json" --emit-digest "$T/u.dig" >/dev/null 2>"$T/err"; rc=$?
check "unwritable periodic state: the run stops at the first save, exit 1 ($rc)" \
  '[[ $rc -eq 1 && $(wc -l < "$T/u.dig") -lt 5 ]] && grep -q "no/such/dir/s.json" "$T/err"'
for v in "5-3" "x" "3-x" "-4" "99999999999999999999" "1-99999999999999999999" ""; do
  "$Z" run "${rec[@]}" --skip-batches "$v" >/dev/null 2>"$T/err"; rc=$?
  check "--skip-batches '$v': usage error naming the option ($rc)" '[[ $rc -eq 2 ]] && grep -q -- "--skip-batches" "$T/err"'
done
"$Z" run "${rec[@]}" --skip-batches 3-6 --skip-batches 6-8 >/dev/null 2>"$T/err"; rc=$?
check "overlapping --skip-batches: usage error ($rc)" '[[ $rc -eq 2 ]] && grep -q "overlaps" "$T/err"'
for v in 0 x -1 99999999999999999999; do
  "$Z" run "${rec[@]}" --save-state "$T/s.json" --save-every "$v" >/dev/null 2>"$T/err"; rc=$?
  check "--save-every '$v': usage error ($rc)" '[[ $rc -eq 2 ]] && grep -q -- "--save-every" "$T/err"'
done
"$Z" run "${rec[@]}" --save-every 5 >/dev/null 2>"$T/err"; rc=$?
check "--save-every without --save-state: usage error ($rc)" '[[ $rc -eq 2 ]]'
"$Z" run "${rec[@]}" --resume "$T/rec/s.json" --start-epoch 1 >/dev/null 2>"$T/err"; rc=$?
check "--resume with --start-epoch: usage error ($rc)" '[[ $rc -eq 2 ]]'

finish
