# mpilib.sh - sourced by the MPI test scripts once Z (the zephon command)
# and MPIRUN are set: Open MPI allowed to run as root and kept on shared
# memory, testlib.sh (T, check, finish), a private shard cache, and run():
# mpirun oversubscribed and unbound, under a timeout so that nothing hangs.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
. "$(dirname "${BASH_SOURCE[0]}")/../testlib.sh"
export XDG_CACHE_HOME="$T/cache"
run() { timeout 120 "$MPIRUN" --oversubscribe --bind-to none "$@"; }

# The mixture tests' three parts: $T/a (4 shards x 80), $T/b (3 x 40), $T/c (2 x 20).
gen_parts() {
  "$Z" gen --out "$T/a" --shards 4 --samples-per-shard 80 --seed 1 >/dev/null || { echo "FAIL - gen a"; exit 1; }
  "$Z" gen --out "$T/b" --shards 3 --samples-per-shard 40 --seed 2 >/dev/null || { echo "FAIL - gen b"; exit 1; }
  "$Z" gen --out "$T/c" --shards 2 --samples-per-shard 20 --seed 3 >/dev/null || { echo "FAIL - gen c"; exit 1; }
}

# The epoch-0 draws (part pass shard:record) of the non-padded samples in
# the --emit-samples files given, one per line, sorted; a draw listed twice
# shows twice.
epoch0_draws() { cat "$@" | awk '$2 == 0 && $5 == 0 {print $3, $4, $6}' | sort; }
