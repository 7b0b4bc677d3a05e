#!/usr/bin/env bash
# slurm_test.sh ZEPHON [TRAIN [PYTHONPATH]] - the slurm/ scripts on a real single-node
# Slurm: starts munged (unless one runs), slurmctld and slurmd with a
# slurm.conf in a temporary folder (this host, 127.0.0.1, private ports),
# submits slurm/zephon-smoke.sbatch (and slurm/zephon-with-training.sbatch
# when TRAIN, the example_mpi_train program, is given) with `sbatch --wait`,
# and, when PYTHONPATH (the built zephon Python package) is given, the
# Python example examples/python/train_mpi.py under `srun --mpi=pmix`;
# then `zephon run` under srun as 2 emulated nodes reading over http, each
# shard downloaded once (shards shared between nodes); checks the reports
# they wrote, and always stops what it started.
#
# Needs root and the slurm-wlm and munge packages (tools/deps.sh --slurm
# installs them; this script installs nothing): a missing piece is a failure.
set -u
Z=$(readlink -f "${1:?usage: slurm_test.sh ZEPHON [TRAIN]}")
TRAIN=${2:+$(readlink -f "$2")}
PYPATH=${3:+$(readlink -f "$3")}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL - $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "the Slurm test runs slurmctld/slurmd as root: run it as root"
for b in munged slurmctld slurmd sbatch sinfo srun; do
  command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] ||
    fail "'$b' not found: install slurm-wlm and munge (tools/deps.sh --slurm)"
done
[[ -r /etc/munge/munge.key ]] || fail "/etc/munge/munge.key missing (the munge package makes it)"
PATH=$PATH:/usr/sbin

T=$(mktemp -d /tmp/zephon-slurm-XXXXXX)
chmod 755 "$T"
HOST=$(hostname)
started_munge=0
cleanup() {
  for d in slurmd slurmctld; do
    [[ -s "$T/$d.pid" ]] && kill "$(cat "$T/$d.pid")" 2>/dev/null
  done
  sleep 0.3
  for d in slurmd slurmctld; do
    [[ -s "$T/$d.pid" ]] && kill -9 "$(cat "$T/$d.pid")" 2>/dev/null
  done
  if [[ $started_munge -eq 1 && -s /run/munge/munged.pid ]]; then
    kill "$(cat /run/munge/munged.pid)" 2>/dev/null
  fi
  rm -rf "$T"
}
trap cleanup EXIT
show_logs() {
  for f in "$T"/slurmctld.log "$T"/slurmd.log "$T"/job-*.out; do
    [[ -f $f ]] && { echo "--- $f"; tail -30 "$f"; }
  done
}

# munge: reuse a running daemon, else start one as the munge user
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
  runuser -u munge -- /usr/sbin/munged || fail "munged does not start"
  started_munge=1
  for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n </dev/null | unmunge >/dev/null 2>&1 || fail "munge does not answer"
fi

CPUS=$(nproc)
mkdir -p "$T/state" "$T/spool"
export SLURM_CONF=$T/slurm.conf
cat > "$SLURM_CONF" <<EOF
ClusterName=zephontest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=26817
SlurmdPort=26818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
EnforcePartLimits=ALL
MinJobAge=4
MailProg=/bin/true
ReturnToService=2
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=1024 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=60 State=UP
EOF
slurmctld -f "$SLURM_CONF" -i || { show_logs; fail "slurmctld does not start"; }
slurmd -f "$SLURM_CONF" || { show_logs; fail "slurmd does not start"; }
state=""
for _ in $(seq 100); do
  state=$(sinfo -h -o %T 2>/dev/null | head -1)
  [[ $state == idle ]] && break
  sleep 0.2
done
[[ $state == idle ]] || { show_logs; fail "the node is '$state', not idle"; }
echo "ok - Slurm up (node $HOST, $CPUS CPUs)"

"$Z" gen --out "$T/data" --shards 6 --samples-per-shard 200 --seed 3 >/dev/null || fail "zephon gen"
cd "$T" || fail "cd"

# Environment for Open MPI inside the job (shared-memory transports only).
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader

# 1. the smoke job: 3 ranks, more than the CPUs of a small VM (--overcommit)
out=$(ZEPHON="$Z" ZEPHON_DATA="$T/data/manifest.json" ZEPHON_REPORT_ROOT="$T/reports" \
      ZEPHON_ARGS="--microbatch 16 --step-time 0.002" \
      timeout 120 sbatch --wait --ntasks=3 -o "$T/job-%j.out" \
      "$SRC/slurm/zephon-smoke.sbatch" 2>&1)
rc=$?
job=$(grep -o 'Submitted batch job [0-9]*' <<<"$out" | grep -o '[0-9]*$')
[[ $rc -eq 0 && -n $job ]] || { echo "$out"; show_logs; fail "smoke job failed (rc $rc)"; }
echo "ok - smoke job $job ran"
R="$T/reports/$job"
for f in report.txt report.json report.csv report.html windows.csv; do
  [[ -s $R/$f ]] || { show_logs; fail "the smoke job wrote no $R/$f"; }
done
echo "ok - report written to reports/$job"
python3 - "$R/report.json" "$job" <<'EOF' || { show_logs; fail "the smoke report is wrong"; }
import json, sys
d = json.load(open(sys.argv[1]))
h = d['header']
assert h['job_id'] == sys.argv[2], h['job_id']
assert h['ranks'] == 3 and h['nodes'] == 1, h
assert len(d['ranks']) == 3 and all(r['valid'] for r in d['ranks'])
assert d['totals']['samples'] == 1200, d['totals']['samples']   # 6 x 200, divisible by 3
assert d['totals']['samples'] == sum(r['samples'] for r in d['ranks'])
assert d['verdict'].startswith('verdict: ')
EOF
echo "ok - the smoke report: job id, 3 ranks, every sample once"
grep -q "^verdict: " "$T/job-$job.out" || { show_logs; fail "the job log lacks the verdict"; }
echo "ok - the job log shows the text report"

# 2. the training example: a node-local copy of the data, 2 ranks
if [[ -n ${TRAIN:-} ]]; then
  out=$(ZEPHON_DATA="$T/data" TRAIN="$TRAIN" TRAIN_ARGS="40 0.002" ZEPHON_LOCAL_ROOT="$T/local" \
        ZEPHON_REPORT_ROOT="$T/reports" \
        timeout 120 sbatch --wait --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 \
        --overcommit -o "$T/job-%j.out" "$SRC/slurm/zephon-with-training.sbatch" 2>&1)
  rc=$?
  job=$(grep -o 'Submitted batch job [0-9]*' <<<"$out" | grep -o '[0-9]*$')
  [[ $rc -eq 0 && -n $job ]] || { echo "$out"; show_logs; fail "training job failed (rc $rc)"; }
  python3 - "$T/reports/$job/report.json" "$job" <<'EOF' || { show_logs; fail "the training report is wrong"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d['header']['job_id'] == sys.argv[2] and d['header']['ranks'] == 2
assert d['totals']['batches'] == 80, d['totals']['batches']   # 40 steps x 2 ranks
EOF
  [[ ! -e "$T/local/zephon-$job" ]] || fail "the node-local copy was not removed"
  echo "ok - training job $job: 40 lock-step steps on 2 ranks, report written, node-local copy cleaned"
fi
# 3. the Python example (mpi4py, a PyTorch loop) launched by srun
if [[ -n ${PYPATH:-} ]]; then
  out=$(timeout 150 sbatch --wait --nodes=1 --ntasks=2 --cpus-per-task=1 --overcommit \
        -o "$T/job-%j.out" --export=ALL,PYTHONPATH="$PYPATH" \
        --wrap "srun --mpi=pmix /usr/bin/python3 $SRC/examples/python/train_mpi.py $T/data/manifest.json --seq-len 128 --report $T/pyreport --ids-out $T/pyids" 2>&1)
  rc=$?
  job=$(grep -o 'Submitted batch job [0-9]*' <<<"$out" | grep -o '[0-9]*$')
  [[ $rc -eq 0 && -n $job ]] || { echo "$out"; tail -20 "$T/job-$job.out" 2>/dev/null; show_logs; fail "Python job failed (rc $rc)"; }
  n=$(cat "$T"/pyids.rank-* | sort -n | uniq | wc -l)
  all=$(cat "$T"/pyids.rank-* | wc -l)
  [[ $n -eq 1200 && $all -eq 1200 ]] || fail "Python job: $n distinct of $all samples, not 1200 once each"
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['header']['ranks'] == 2, d['header']
assert d['totals']['samples'] == 1200, d['totals']['samples']
" "$T/pyreport/report.json" || { show_logs; fail "the Python job's report is wrong"; }
  echo "ok - Python job $job: srun --mpi=pmix, 2 ranks, every sample once, report written"
fi
# 4. shards shared between nodes under srun: 4 tasks as 2 emulated nodes
# read the data over http (Python's http.server, its log counting the
# downloads), 2 epochs: each shard downloaded once in the job, the rest
# received from the other node (docs/storage.md, "Shards from other nodes")
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$T/data" "$port" 2> "$T/http.log" >/dev/null &
hp=$!
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/manifest.json" && break; sleep 0.1; done
out=$(timeout 150 sbatch --wait --nodes=1 --ntasks=4 --cpus-per-task=1 --overcommit \
      -o "$T/job-%j.out" --export=ALL,ZEPHON_EMULATED_NODES=2 \
      --wrap "srun --mpi=pmix $Z run http://127.0.0.1:$port/manifest.json --epochs 2 --threads 1 --microbatch 16 --cache-dir $T/peercache --report $T/peerreport" 2>&1)
rc=$?
kill "$hp" 2>/dev/null; wait "$hp" 2>/dev/null
job=$(grep -o 'Submitted batch job [0-9]*' <<<"$out" | grep -o '[0-9]*$')
[[ $rc -eq 0 && -n $job ]] || { echo "$out"; tail -20 "$T/job-$job.out" 2>/dev/null; show_logs; fail "the sharing job failed (rc $rc)"; }
[[ $(grep -c "every sample once" "$T/job-$job.out") -eq 2 ]] || { tail -20 "$T/job-$job.out"; fail "the sharing job: not every sample once in both epochs"; }
gets=$(grep -c '"GET /shard-' "$T/http.log")
uniq_gets=$(grep -o '"GET /shard-[^ ]*' "$T/http.log" | sort -u | wc -l)
[[ $gets -eq 6 && $uniq_gets -eq 6 ]] || fail "the sharing job: $gets downloads of $uniq_gets shards, not each of the 6 once"
grep -q "^between nodes: [1-9]" "$T/peerreport/report.txt" || fail "the sharing job's report shows nothing received between nodes"
[[ -d $T/peercache/node-0 && -d $T/peercache/node-1 ]] || fail "the sharing job: no cache folder per emulated node"
echo "ok - sharing job $job: srun --mpi=pmix, 2 emulated nodes of 2 ranks, 2 epochs, each shard downloaded once"
echo "slurm test passed"
