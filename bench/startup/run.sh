#!/usr/bin/env bash
# bench/startup/run.sh [BUILD_DIR] [NP] [SHARDS] - startup at job scale
# (issue 24, point 6): a manifest of SHARDS (default 100,000) tiny shards,
# NP (default 16) ranks under mpirun (oversubscribed on small machines), the
# time to every rank's first batch and the bytes and stat() calls each rank
# makes on the way, three rounds (bench/startup/bench_startup.c says what
# each figure measures). Goal: under 2 s, and the manifest read once per
# job (by rank 0), not once per rank.
# Builds bench_startup and the counting preload library (tests/mpi/fscount.c)
# in BUILD_DIR (default build/release); the shards go under $TMPDIR (removed
# at the end).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
NP=${2:-16}
N=${3:-100000}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF ${CMAKE_ARGS:-} >/dev/null
cmake --build "$B" -j2 --target bench_startup zp_fscount >/dev/null
D=$(mktemp -d "${TMPDIR:-/tmp}/bench_startup.XXXXXX")
trap 'rm -rf "$D"' EXIT
t0=$(date +%s.%N)
"$B/bench_startup" make "$D" "$N"
echo "made $N shards and their manifest in $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}") s"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
# oversubscribed ranks yield the core while they wait
export OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$D/count"
echo "cores: $(nproc); $NP ranks; Open MPI $(mpirun --version | head -1 | grep -o '[0-9.]*$')"
mpirun --oversubscribe --bind-to none -np "$NP" \
  -x LD_PRELOAD="$(realpath "$B")/libzp_fscount.so" -x FSCOUNT_MANIFEST="$D/manifest.json" \
  -x FSCOUNT_SHARDS="$D/s/" -x FSCOUNT_OUT="$D/count" \
  "$B/bench_startup" run "$D/manifest.json" 3
# the file system calls of all three rounds, per rank
awk 'FNR == 1 {r = FILENAME; sub(/.*rank-/, "", r); sub(/\.txt/, "", r)}
     {v[r, $1] = $2; if (!(r in seen)) {seen[r] = 1; n++}}
     END {
       mo = 0; ms = 0; so = 0;
       for (r = 1; r < n; r++) {
         if (v[r, "manifest_opens"] > mo) mo = v[r, "manifest_opens"];
         if (v[r, "shard_stats"] > ms) ms = v[r, "shard_stats"];
         if (v[r, "shard_opens"] > so) so = v[r, "shard_opens"];
       }
       printf "file system calls over the 3 rounds (tests/mpi/fscount.c):\n";
       printf "  rank 0: manifest opened %d times, %d stat() calls and %d opens on shard files\n",
              v[0, "manifest_opens"], v[0, "shard_stats"], v[0, "shard_opens"];
       printf "  ranks 1..%d (max): manifest opened %d times, %d stat() calls and %d opens on shard files\n",
              n - 1, mo, ms, so;
     }' "$D"/count/rank-*.txt
