#!/usr/bin/env bash
# test_mpi_startup.sh BENCH_STARTUP FSCOUNT_SO MPIRUN - startup at job scale
# (docs/mpi.md, "Startup"): with a manifest of 3,000 shards and 4 ranks,
# rank 0 alone reads the manifest and stats the shards; the other ranks
# build their dataset from what rank 0 broadcasts, without opening the
# manifest and without a stat() per shard (they stat only the shards they
# load). The file system calls are counted by a preload library
# (tests/mpi/fscount.c), not timed: the test fails when a rank other than 0
# opens the manifest or stats more than a tenth of the shards, and checks
# that the counter does see rank 0's reads, so that it cannot pass blind.
# Not run under ASan (label nosan): a preload library ahead of the
# sanitizer's runtime is refused.
set -u
B=$(realpath "${1:?usage: test_mpi_startup.sh BENCH_STARTUP FSCOUNT_SO MPIRUN}")
SO=$(realpath "${2:?}")
MPIRUN=${3:-mpirun}
Z=$B # (mpilib.sh's name for the program under test)
. "$(dirname "$0")/mpilib.sh"

N=3000
"$B" make "$T/d" "$N" >/dev/null || { echo "FAIL - bench_startup make"; exit 1; }
mkdir -p "$T/count"
run -np 4 -x LD_PRELOAD="$SO" -x FSCOUNT_MANIFEST="$T/d/manifest.json" \
  -x FSCOUNT_SHARDS="$T/d/s/" -x FSCOUNT_OUT="$T/count" \
  "$B" run "$T/d/manifest.json" 1 > "$T/out" 2> "$T/err"; rc=$?
check "4 ranks reach their first batch with $N shards (rc $rc)" '[[ $rc -eq 0 ]]' ||
  tail -5 "$T/err"
get() { awk -v k="$2" '$1 == k {print $2}' "$T/count/rank-$1.txt" 2>/dev/null; }
check "every rank wrote its counts" \
  '[[ -s $T/count/rank-0.txt && -s $T/count/rank-1.txt && -s $T/count/rank-2.txt && -s $T/count/rank-3.txt ]]'
check "rank 0 opens the manifest (the counter sees it: $(get 0 manifest_opens))" \
  '[[ $(get 0 manifest_opens) -ge 1 ]]'
check "rank 0 checks every shard once (the counter sees its stat() calls: $(get 0 shard_stats))" \
  '[[ $(get 0 shard_stats) -ge $N ]]'
for r in 1 2 3; do
  check "rank $r never opens the manifest ($(get $r manifest_opens) opens)" \
    '[[ $(get $r manifest_opens) -eq 0 ]]'
  check "rank $r stats no shard it does not load ($(get $r shard_stats) stat() calls, $(get $r shard_opens) opens, of $N shards)" \
    '[[ $(get $r shard_stats) -lt $((N / 10)) && $(get $r shard_stats) -le $(get $r shard_opens) ]]'
done
grep -q "time to every rank's first batch" "$T/out"
check "the benchmark's figures are printed" '[[ $? -eq 0 ]]'
finish
