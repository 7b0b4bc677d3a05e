#!/usr/bin/env bash
# test_signals_mpi.sh ZEPHON MPIRUN - `zephon run` under mpirun stopped by a
# signal that reaches one rank only: every rank stops at the same step
# within a second (no rank left waiting in a collective), exits 128+signo,
# its outputs end in complete lines, its metrics say partial, and the
# report is written and marked partial in every format (txt, json, csv,
# html).
set -u
Z=${1:?usage: test_signals_mpi.sh ZEPHON MPIRUN}
MPIRUN=${2:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export XDG_CACHE_HOME
. "$(dirname "$0")/../testlib.sh"
XDG_CACHE_HOME="$T/cache"

"$Z" gen --out "$T/ds" --shards 4 --samples-per-shard 2000 --format jsonl >/dev/null || { echo "FAIL - gen"; exit 1; }
M="$T/ds/manifest.json"
# A rank's end after the report goes through MPI_Finalize, whose last
# exchange with mpirun is served on mpirun's own one-second tick (mpirun
# ends 1.2 or 2.2 s after the signal on a quiet machine): on a loaded one a
# rank has been seen ending with mpirun, 2.16 s after the signal. The
# bounds on the processes' end allow for that; the stop itself (every rank
# stopped, the report written) is bounded the same in every build. Under
# AddressSanitizer the end (the leak check with full stacks) takes seconds
# more.
end_ms=4000; mpirun_ms=5000
if ldd "$Z" 2>/dev/null | grep -q libasan; then end_ms=10000; mpirun_ms=12000; fi

# a process that has not exited (a zombie not yet reaped by mpirun has)
alive() { [[ -e /proc/$1 ]] && ! grep -q "^State:.*Z" /proc/$1/status 2>/dev/null; }

# the pid of rank R among the descendants of pid P (timeout -> mpirun -> ranks)
rank_pid() {
  local parent=$1 want=$2 c
  for c in $(pgrep -P "$parent"); do
    if tr '\0' '\n' < /proc/$c/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$want"; then
      echo "$c"; return 0
    fi
    rank_pid "$c" "$want" && return 0
  done
  return 1
}

for sig in ${ZP_SIGNALS:-TERM INT}; do
  [[ $sig == INT ]] && want=130 || want=143
  rm -rf "$T/rep" "$T"/d.txt* "$T"/m.json*
  timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 2 "$Z" run "$M" --quiet --threads 1 \
    --microbatch 4 --step-time 0.05 --emit-digest "$T/d.txt" --metrics-out "$T/m.json" \
    --report "$T/rep" > "$T/out" 2> "$T/err" &
  mp=$!
  pid=""
  for _ in $(seq 100); do pid=$(rank_pid $mp 1) && break; sleep 0.1; done
  if [[ -z "$pid" ]]; then bad "SIG$sig: rank 1 not found"; kill $mp; wait $mp; continue; fi
  sleep 2 # started, running its steps (1000 steps of 50 ms in all)
  t0=$(date +%s%N)
  pid0=$(rank_pid $mp 0)
  kill -s $sig "$pid"
  for _ in $(seq 200); do [[ -s "$T/rep/report.json" ]] && break; sleep 0.02; done
  ts=$(date +%s%N)
  for _ in $(seq 400); do alive $pid || alive $pid0 || break; sleep 0.05; done
  tr=$(date +%s%N)
  for _ in $(seq 100); do kill -0 $mp 2>/dev/null || break; sleep 0.1; done
  t1=$(date +%s%N)
  ms=$(( (tr - t0) / 1000000 ))
  # the ranks also gather and write the final report before they end
  sms=$(( (ts - t0) / 1000000 ))
  check "SIG$sig to rank 1: every rank stopped and the report was written within 1.5 s (${sms} ms)" '[[ $sms -lt 1500 ]]'
  check "SIG$sig to rank 1: both ranks ended within $((end_ms / 1000)) s (${ms} ms)" '[[ $ms -lt $end_ms ]]'
  kill -0 $mp 2>/dev/null && { bad "SIG$sig: mpirun still running after 10 s"; kill -9 $mp; }
  wait $mp; rc=$?
  ms=$(( (t1 - t0) / 1000000 ))
  # mpirun's own start and stop take part of this; the ranks stop at the next step
  check "SIG$sig to rank 1: mpirun done within $((mpirun_ms / 1000)) s (${ms} ms)" '[[ $ms -lt $mpirun_ms ]]'
  # (under ASan a rank still in its leak check when the other exits may be
  # ended by mpirun, which then reports 1)
  check "SIG$sig to rank 1: exit $want ($rc)" '[[ $rc -eq $want || ( $end_ms -gt 4000 && $rc -eq 1 ) ]]'
  n0=$(wc -l < "$T/d.txt.rank-0"); n1=$(wc -l < "$T/d.txt.rank-1")
  check "SIG$sig: both ranks stopped at the same step ($n0, $n1) before the end" '[[ $n0 -eq $n1 && $n0 -ge 1 && $n0 -lt 1000 ]]'
  check "SIG$sig: digests end in complete lines" '[[ -z $(tail -c1 "$T/d.txt.rank-0") && -z $(tail -c1 "$T/d.txt.rank-1") ]]'
  for r in 0 1; do
    check "SIG$sig: rank $r metrics say partial, SIG$sig" \
      'python3 -c "import json,sys; d=json.load(open(\"$T/m.json.rank-$r\")); sys.exit(0 if d[\"partial\"] is True and d[\"signal\"]==\"SIG$sig\" else 1)"'
  done
  check "SIG$sig: report.json written and marked partial" \
    'python3 -c "import json,sys; d=json.load(open(\"$T/rep/report.json\")); sys.exit(0 if d[\"partial\"] is True and d[\"signal\"]==\"SIG$sig\" and d[\"partial_steps\"]==$n0 else 1)"'
  check "SIG$sig: report.txt starts with the partial line" \
    'head -1 "$T/rep/report.txt" | grep -qx "PARTIAL REPORT: the run was stopped (SIG$sig) after $n0 steps"'
  check "SIG$sig: report.csv and windows.csv start with a partial comment" \
    'head -1 "$T/rep/report.csv" | grep -q "^# PARTIAL REPORT: .*(SIG$sig)" && head -1 "$T/rep/windows.csv" | grep -q "^# PARTIAL REPORT: .*(SIG$sig)"'
  check "SIG$sig: report.html shows the partial banner" \
    'grep -q "<div class=\"partial\" id=\"partial\">PARTIAL REPORT: the run was stopped (SIG$sig) after $n0 steps</div>" "$T/rep/report.html"'
  check "SIG$sig: rank 0 says another rank received it" 'grep -q "rank 0: stopping: another rank received SIG$sig" "$T/err"'
  check "SIG$sig: rank 1 does not say another rank did" '! grep -q "rank 1: stopping: another rank" "$T/err"'
done

# SIGINT to mpirun itself (Ctrl-C): Open MPI's mpirun sends SIGTERM to every
# rank; each stops cleanly and the report is written, marked partial
rm -rf "$T/rep" "$T"/d.txt* "$T"/m.json*
timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 2 "$Z" run "$M" --quiet --threads 1 \
  --microbatch 4 --step-time 0.05 --emit-digest "$T/d.txt" --metrics-out "$T/m.json" \
  --report "$T/rep" > "$T/out" 2> "$T/err" &
tp=$!
pid=""
for _ in $(seq 100); do pid=$(rank_pid $tp 1) && break; sleep 0.1; done
sleep 2
mp=$(pgrep -P $tp)
kill -s INT $mp
wait $tp; rc=$?
check "SIGINT to mpirun: nonzero exit ($rc)" '[[ $rc -ne 0 && $rc -ne 124 ]]'
for r in 0 1; do
  check "SIGINT to mpirun: rank $r metrics say partial" \
    'python3 -c "import json,sys; d=json.load(open(\"$T/m.json.rank-$r\")); sys.exit(0 if d[\"partial\"] is True and d[\"signal\"] in (\"SIGINT\",\"SIGTERM\") else 1)"'
done
check "SIGINT to mpirun: report written, marked partial" \
  'python3 -c "import json,sys; d=json.load(open(\"$T/rep/report.json\")); sys.exit(0 if d[\"partial\"] is True else 1)"'

# an output that fails on rank 1 only (its --emit-ids file is /dev/full):
# every rank stops at the same step, exit 1, the report says why
rm -rf "$T/rep" "$T/ids"; mkdir "$T/ids"; ln -s /dev/full "$T/ids/rank-1.ids"
timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 2 "$Z" run "$M" --quiet --threads 1 \
  --microbatch 4 --emit-ids "$T/ids" --report "$T/rep" > "$T/out" 2> "$T/err"
rc=$?
check "output failing on rank 1: exit 1 ($rc)" '[[ $rc -eq 1 ]]'
check "output failing on rank 1: rank 1 names its file, rank 0 says another rank" \
  'grep -q "cannot write .*rank-1.ids" "$T/err" && grep -q "rank 0: stopping: another rank could not write an output" "$T/err" && ! grep -q "rank 1: stopping: another rank" "$T/err"'
check "output failing on rank 1: every report file says partial, why" \
  'head -1 "$T/rep/report.txt" | grep -q "^PARTIAL REPORT: the run was stopped (an output could not be written)" && head -1 "$T/rep/report.csv" | grep -q "^# PARTIAL REPORT" && grep -q "id=\"partial\"" "$T/rep/report.html" && python3 -c "import json,sys; d=json.load(open(\"$T/rep/report.json\")); sys.exit(0 if d[\"partial\"] is True and \"signal\" not in d and d[\"partial_reason\"]==\"an output could not be written\" else 1)"'

finish
