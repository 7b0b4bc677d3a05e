#!/usr/bin/env bash
# test_python_mpi.sh ZEPHON MPIRUN PYTHON PYTHONPATH - the Python package
# under mpirun: examples/python/train_mpi.py (a PyTorch training loop, the
# WorkSource on mpi4py's COMM_WORLD) on 2 and 3 ranks:
#  1. every rank ends (exit 0), the ranks' documents partition the dataset
#     (each sample exactly once: 601 samples, not a multiple of the ranks,
#     so the WorkSource pads: the padded repeats are told apart);
#  2. rank 0 writes the cluster report (txt, json, csv, html) listing every rank;
#  3. ranks that disagree on the settings fail on every rank, naming it;
#  4. zephon.mpi.balanced_batches: each step's rows over the ranks are the
#     unbalanced steps' rows, each once, and the max/mean ratio drops.
set -u
Z=$(realpath "${1:?usage: test_python_mpi.sh ZEPHON MPIRUN PYTHON PYTHONPATH}")
MPIRUN=${2:-mpirun}
PY=${3:-python3}
export PYTHONPATH=${4:?}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
. "$(dirname "$0")/../testlib.sh"
EX="$(dirname "$0")/../../examples/python/train_mpi.py"
run() { timeout 120 "$MPIRUN" --oversubscribe --bind-to none "$@"; }

"$Z" gen --out "$T/ds" --format jsonl --shards 5 --samples-per-shard 120 --seed 4 >/dev/null &&
  printf '{"id": 600, "text": "one more"}\n' > "$T/extra.jsonl" || { echo "FAIL - gen"; exit 1; }

for np in 2 3; do
  rm -rf "$T/rep$np"
  run -np $np "$PY" "$EX" "$T/ds/manifest.json" "$T/extra.jsonl" --seq-len 128 \
    --report "$T/rep$np" --ids-out "$T/ids$np" > "$T/out$np" 2>&1; rc=$?
  check "np=$np: exit 0 ($rc)" '[[ $rc -eq 0 ]]' || tail -20 "$T/out$np"
  n=$(cat "$T/ids$np".rank-* | sort -n | uniq | wc -l)
  all=$(cat "$T/ids$np".rank-* | wc -l)
  check "np=$np: the ranks' documents cover the 601 samples ($n distinct)" '[[ $n -eq 601 ]]'
  pad=$(( (np - 601 % np) % np ))
  check "np=$np: each sample once, plus $pad padded repeats ($all in all)" '[[ $all -eq $((601 + pad)) ]]'
  for f in report.txt report.json report.csv report.html; do
    check "np=$np: rank 0 wrote $f" '[[ -s "$T/rep$np/$f" ]]'
  done
  ranks=$("$PY" -c "import json,sys; print(len(json.load(open(sys.argv[1]))['ranks']))" "$T/rep$np/report.json" 2>&1)
  check "np=$np: the report lists $np ranks ($ranks)" '[[ "$ranks" == "$np" ]]'
done

# 3. a rank with other settings: every rank fails with the message
cat > "$T/bad.py" <<'PY'
import sys
from mpi4py import MPI
from zephon import Dataset, WorkSource
comm = MPI.COMM_WORLD
try:
    WorkSource(Dataset(sys.argv[1]), seed=comm.Get_rank(), comm=comm)
except Exception as e:
    # a file per rank: mpirun may end the job before forwarding every
    # rank's output once one exits nonzero
    with open(f"{sys.argv[2]}.rank-{comm.Get_rank()}", "w") as f:
        f.write(f"{e}\n")
    comm.Barrier()  # every rank wrote it before any exits
    sys.exit(3)
PY
run -np 2 "$PY" "$T/bad.py" "$T/ds/manifest.json" "$T/bad" > "$T/bad.out" 2>&1; rc=$?
check "disagreeing ranks: nonzero exit ($rc)" '[[ $rc -ne 0 ]]'
check "disagreeing ranks: both ranks say why" \
  '[[ $(cat "$T"/bad.rank-* | grep -c "ranks disagree on the dataset or the worksource settings") -eq 2 ]]'
# 4. cross-rank attention-cost balance from Python
cat > "$T/bal.py" <<'PY'
import hashlib, json, sys
from mpi4py import MPI
from zephon import Dataset, Pipeline, WorkSource
from zephon.mpi import balanced_batches
comm = MPI.COMM_WORLD
K = 3
def pipe():
    return (Pipeline(WorkSource(Dataset(sys.argv[1]), seed=2, comm=comm), threads=1)
            .tokenize(tokenizer_id="gpt2", field="text").batch(microbatch_size=4)
            .pack("concat", 127).doc_masking())
def key(t, s):
    return hashlib.sha1(t.tobytes() + s.tobytes()).hexdigest()
plain = [[key(b.tokens[r], b.segment_ids[r]) for r in range(4)] for b in pipe()]
bb = balanced_batches(pipe(), comm, K)
steps = []
for i, d in enumerate(bb):
    if i % K == 0:
        steps.append([])
    assert d["cu_seqlens"][-1] == 4 * 127 and d["position_ids"].shape == (4, 128)
    steps[-1] += [key(d["tokens"][r], d["segment_ids"][r]) for r in range(4)]
st = bb.stats()
bb.close()
mine = [sum(plain[s * K:(s + 1) * K], []) for s in range(len(steps))]
allp, allb = comm.gather(mine), comm.gather(steps)
if comm.Get_rank() == 0:
    n = len(allb[0])
    same = all(sorted(sum((p[s] for p in allp), [])) == sorted(sum((b[s] for b in allb), []))
               for s in range(n))
    print(json.dumps({"steps": n, "same": same, **st}))
PY
run -np 2 "$PY" "$T/bal.py" "$T/ds/manifest.json" > "$T/bal.out" 2>&1; rc=$?
check "balanced_batches: exit 0 ($rc)" '[[ $rc -eq 0 ]]' || tail -20 "$T/bal.out"
check "balanced_batches: each step's rows are the unbalanced step's, each once" \
  'grep -q "\"same\": true" "$T/bal.out" && ! grep -q "\"steps\": 0" "$T/bal.out"'
check "balanced_batches: max/mean lower after (rank level)" \
  '"$PY" -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); assert d[\"rank_imbalance_after\"] < d[\"rank_imbalance_before\"], d" "$T/bal.out"'
# threads under a launcher: comm_info's binding figures (docs/mpi.md)
C=$(nproc); want=$((C / 2)); [[ $want -ge 1 ]] || want=1
run -np 2 "$PY" -c "
import sys
from mpi4py import MPI
import zephon.mpi as zm
i = zm.comm_info(MPI.COMM_WORLD)
with open(sys.argv[1] + '.%d' % i['rank'], 'w') as f:
    print(i['suggested_threads'], i['cores'], i['sharing'], i['node_cores'], file=f)
" "$T/threads" > "$T/threads.out" 2>&1
check "comm_info: 2 unbound ranks on $C cores: suggested $want, cores $C, sharing 2 ($(cat "$T"/threads.[01] 2>/dev/null | tr '\n' ' '))" \
  '[[ $(cat "$T/threads.0" "$T/threads.1" 2>/dev/null | grep -c "^$want $C 2 $C$") -eq 2 ]]' || cat "$T/threads.out"
finish
