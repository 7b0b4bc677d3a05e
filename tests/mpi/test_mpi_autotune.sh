#!/usr/bin/env bash
# test_mpi_autotune.sh ZEPHON MPIRUN - the cluster report shows each rank's
# automatic settings (docs/pipeline.md, "Autotune"; docs/report.md): 2 ranks,
# 2 threads each, fetch slowed by 60 ms a chunk (fault injection), so that
# fetch is what the consumer waits for (also under ASan, where tokenize is
# many times slower: at 20 ms its queue was not always the longest) and
# automatic fetch parallelism rises to 2 on both; the JSON's ranks carry
# the values and which are automatic, the text's header a "tuning:" line.
# With --fetch-parallelism 1 the report says 1, not automatic.
set -u
Z=$(realpath "${1:?usage: test_mpi_autotune.sh ZEPHON MPIRUN}")
MPIRUN=${2:-mpirun}
. "$(dirname "$0")/mpilib.sh"
"$Z" gen --out "$T/d" --shards 4 --samples-per-shard 100 --seed 2 >/dev/null || { echo "FAIL - gen"; exit 1; }
args=(--microbatch 8 --chunk-samples 8 --threads 2 --tokenize gpt2 --seq-len 127 --quiet
      --fetch-delay-us 60000)
tuning() { # FILE KEY: each rank's tuning[KEY], space-separated
  python3 -c "import json,sys; print(' '.join(str(x['tuning'].get(sys.argv[2])) for x in json.load(open(sys.argv[1]))['ranks']))" "$1" "$2"
}

run -np 2 "$Z" run "$T/d/manifest.json" "${args[@]}" --report "$T/r1" >"$T/o1" 2>"$T/e1"; rc=$?
check "auto: completes (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/e1"
check "auto: fetch parallelism 2 on both ranks ($(tuning "$T/r1/report.json" fetch_parallelism))" \
  '[[ $(tuning "$T/r1/report.json" fetch_parallelism) == "2 2" ]]'
check "auto: fetch, tokenize and prefetch_batches automatic on both ranks" \
  'python3 -c "
import json, sys
for x in json.load(open(sys.argv[1]))[\"ranks\"]:
    assert set(x[\"tuning\"][\"auto\"]) == {\"prefetch_batches\", \"fetch_parallelism\", \"tokenize_parallelism\"}, x
" "$T/r1/report.json"'
check "auto: the text report's tuning line" \
  'grep -qE "^tuning: prefetch_batches [0-9-]+ \(auto\), fetch parallelism 2 \(auto\), tokenize parallelism [12-]+ \(auto\)$" "$T/r1/report.txt"'

run -np 2 "$Z" run "$T/d/manifest.json" "${args[@]}" --fetch-parallelism 1 --prefetch-batches 3 \
  --report "$T/r2" >"$T/o2" 2>"$T/e2"; rc=$?
check "fixed: completes (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/e2"
check "fixed: fetch 1 and prefetch 3 on both ranks, not automatic" \
  '[[ $(tuning "$T/r2/report.json" fetch_parallelism) == "1 1" &&
     $(tuning "$T/r2/report.json" prefetch_batches) == "3 3" ]] &&
   grep -qE "^tuning: prefetch_batches 3, fetch parallelism 1, tokenize parallelism [12-]+ \(auto\)$" "$T/r2/report.txt"'
finish
