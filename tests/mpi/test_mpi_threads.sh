#!/usr/bin/env bash
# test_mpi_threads.sh ZEPHON MPIRUN - threads under a launcher (docs/mpi.md,
# "Threads per rank"): the default thread count of a rank is the cores its
# binding allows divided by the ranks of its node sharing them; --threads
# and OMP_NUM_THREADS still win; the report shows the threads per rank and
# warns when a node runs more threads than its cores.
#  1. 2 ranks unbound (--bind-to none) on this node's C cores: max(1, C/2)
#     threads each, each rank's binding C cores shared by 2; no warning;
#  2. --threads C: 2C threads on C cores: the report (text, JSON, HTML)
#     warns that the node is oversubscribed, naming the counts;
#  3. OMP_NUM_THREADS=1 wins over the suggestion;
#  4. bound to one core each (--bind-to core, when there are 2 cores): 1
#     thread, sharing 1.
set -u
Z=$(realpath "${1:?usage: test_mpi_threads.sh ZEPHON MPIRUN}")
MPIRUN=${2:-mpirun}
. "$(dirname "$0")/mpilib.sh"
C=$(nproc)
want=$((C / 2)); [[ $want -ge 1 ]] || want=1
"$Z" gen --out "$T/d" --shards 4 --samples-per-shard 50 --seed 2 >/dev/null || { echo "FAIL - gen"; exit 1; }
args=(--microbatch 5 --quiet)
jq_over() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['oversubscribed'])" "$1"; }
jq_ranks() { # FILE FIELD: the field of each rank, space-separated
  python3 -c "import json,sys; print(' '.join(str(x[sys.argv[2]]) for x in json.load(open(sys.argv[1]))['ranks']))" "$1" "$2"
}

# 1. the suggestion
run -np 2 "$Z" run "$T/d/manifest.json" "${args[@]}" --report "$T/r1" >"$T/o1" 2>"$T/e1"; rc=$?
check "unbound: completes (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/e1"
check "unbound: $want thread(s) per rank on $C cores shared by 2 ranks ($(jq_ranks "$T/r1/report.json" threads))" \
  '[[ $(jq_ranks "$T/r1/report.json" threads) == "$want $want" ]]'
check "unbound: cores $C, sharing 2, node cores $C" \
  '[[ $(jq_ranks "$T/r1/report.json" cores) == "$C $C" && $(jq_ranks "$T/r1/report.json" sharing) == "2 2" &&
     $(jq_ranks "$T/r1/report.json" node_cores) == "$C $C" ]]'
check "unbound: the header says $want threads per rank" 'grep -q "), $want threads per rank" "$T/r1/report.txt"'
check "unbound: no oversubscription warning" \
  '! grep -q oversubscribed "$T/r1/report.txt" && [[ -z $(jq_over "$T/r1/report.json") ]]'

# 2. an explicit --threads wins, and oversubscribes
run -np 2 "$Z" run "$T/d/manifest.json" "${args[@]}" --threads "$C" --report "$T/r2" >"$T/o2" 2>"$T/e2"; rc=$?
check "--threads $C: completes (rc $rc), $C threads per rank" \
  '[[ $rc -eq 0 && $(jq_ranks "$T/r2/report.json" threads) == "$C $C" ]]'
check "--threads $C: the report warns: $((2 * C)) threads of 2 ranks on $C cores" \
  'grep -q "^warning: oversubscribed: node 0 ([^)]*): $((2 * C)) threads of 2 ranks on $C core" "$T/r2/report.txt" &&
   [[ $(jq_over "$T/r2/report.json") == "node 0 ("*"): $((2 * C)) threads of 2 ranks on $C core"* ]] &&
   grep -q "<b>Oversubscribed:</b> node 0" "$T/r2/report.html"'

# 3. OMP_NUM_THREADS wins
run -np 2 -x OMP_NUM_THREADS=1 "$Z" run "$T/d/manifest.json" "${args[@]}" --report "$T/r3" >"$T/o3" 2>"$T/e3"; rc=$?
check "OMP_NUM_THREADS=1: completes (rc $rc), 1 thread per rank" \
  '[[ $rc -eq 0 && $(jq_ranks "$T/r3/report.json" threads) == "1 1" ]]'

# 4. bound to a core each
if [[ $C -ge 2 ]]; then
  timeout 120 "$MPIRUN" --bind-to core -np 2 "$Z" run "$T/d/manifest.json" "${args[@]}" --report "$T/r4" \
    >"$T/o4" 2>"$T/e4"; rc=$?
  check "bound to a core: completes (rc $rc), 1 thread, cores 1, sharing 1, node cores 2" \
    '[[ $rc -eq 0 && $(jq_ranks "$T/r4/report.json" threads) == "1 1" && $(jq_ranks "$T/r4/report.json" cores) == "1 1" &&
       $(jq_ranks "$T/r4/report.json" sharing) == "1 1" && $(jq_ranks "$T/r4/report.json" node_cores) == "2 2" ]]' ||
    cat "$T/e4"
fi
finish
