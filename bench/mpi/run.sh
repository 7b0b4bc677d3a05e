#!/usr/bin/env bash
# bench/mpi/run.sh [BUILD_DIR] - the time of one cluster report (gather +
# analysis) and the bytes gathered per rank at 2, 4, 8 and 16 ranks
# (oversubscribed on small machines: the times then include the ranks
# waiting for a core). Builds bench_mpi_report if needed.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/bench-mpi}
if [[ ! -x $B/bench_mpi_report ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
  cmake --build "$B" -j"$(nproc)" --target bench_mpi_report >/dev/null
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
# oversubscribed ranks must yield the core while they wait (else busy polling
# makes an 8-rank report on 2 cores take ~300 ms instead of ~0.3 ms)
export OMPI_MCA_mpi_yield_when_idle=1
echo "cores: $(nproc); Open MPI $(mpirun --version | head -1 | grep -o '[0-9.]*$')"
for np in 2 4 8 16; do
  mpirun --oversubscribe --bind-to none -np "$np" "$B/bench_mpi_report" "${REPEATS:-40}"
done
# the root's share at sizes this machine cannot launch (simulated in one
# process, bench/mpi/report_sim.c), and the report files' sizes: N ranks,
# W windows (+ the final report), S shards named one by one
for n in 16 1000 10000; do
  "$B/bench_mpi_report" --analyse "$n" 20 100000
done
# 10,000 ranks and 100,000 shards with the default window history (256
# windows) full, and with max_windows 64
"$B/bench_mpi_report" --analyse 10000 270 100000
"$B/bench_mpi_report" --analyse 10000 270 100000 64
