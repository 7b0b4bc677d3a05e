#!/usr/bin/env bash
# test_remote_mpi_stop.sh ZEPHON MPIEXEC - SIGTERM to mpirun while both ranks
# wait on stalled downloads (what scancel or a job's time limit does):
# mpirun forwards SIGTERM to the ranks and kills them about 2 s later. The
# ranks must stop within that grace period (docs/storage.md, "Stopping"):
# the metrics, the cluster report and the state are written, the run says
# it was stopped, and no partial download or lock is left in the cache.
set -u
Z=${1:?usage: test_remote_mpi_stop.sh PATH_TO_ZEPHON MPIEXEC}
MPIEXEC=${2:?usage: test_remote_mpi_stop.sh PATH_TO_ZEPHON MPIEXEC}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rmstop

make_ds rmstop 4 40
# every shard through the proxy, which sends 2000 bytes and then nothing
# (the transfers' low-speed abort would take 30 s)
python3 - "$ROOT/rmstop/manifest.json" "$PROXY" > "$T/stall.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); proxy = sys.argv[2]
for s in m["shards"]:
    s["name"] = s["path"]
    s["path"] = proxy + "/f/stall:2000*0/rmstop/" + s["path"]
print(json.dumps(m))
PY
c="$T/cache"
set -m   # the run in its own process group, its SIGTERM handling untouched
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader \
  "$MPIEXEC" -np 2 --oversubscribe --bind-to none "$Z" run "$T/stall.json" --seed 5 --threads 1 \
  --microbatch 8 --connect-timeout 2 --low-speed-time 30 --retries 2 --prefetch 100:2 \
  --cache-dir "$c" --metrics-out "$T/m.json" --report "$T/rep" --save-state "$T/st.json" \
  >"$T/run.out" 2>&1 &
mp=$!
# both ranks' downloads have started (and stall)
for _ in $(seq 200); do
  [[ $(ls "$c" 2>/dev/null | grep -c "\.zdc\.lock$") -ge 2 ]] && break; sleep 0.05
done
sleep 1
t0=$(date +%s%N)
kill -TERM "$mp"
# bounded wait: mpirun itself ends the ranks ~2 s after its SIGTERM
for _ in $(seq 300); do kill -0 "$mp" 2>/dev/null || break; sleep 0.05; done
kill -KILL "$mp" 2>/dev/null
wait "$mp"; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
set +m
# checkv DESCRIPTION 'CONDITION': check, and show the run's output when it failed
checkv() { local f=$fails; check "$1" "$2"; [[ $fails -eq $f ]] || cat "$T/run.out"; }
# the last output a rank writes, its metrics, is there well before the kill
last=$(stat -c %.9Y "$T/m.json.rank-0" "$T/m.json.rank-1" 2>/dev/null | sort -n | tail -n1)
out_ms=99999
[[ -n $last ]] && out_ms=$(python3 -c "print(int(($last - $t0 / 1e9) * 1000))")
checkv "SIGTERM to mpirun during stalled downloads: the ranks' outputs written ${out_ms} ms \
after it (mpirun ended in ${ms} ms, rc $rc)" '[[ $out_ms -lt 1500 ]]'
checkv "both ranks say they were stopped by SIGTERM, no error" \
  '[[ $(grep -c "stopped by SIGTERM" "$T/run.out") -ge 2 ]] && ! grep -qi "error" "$T/run.out"'
check "the metrics of both ranks are written" '[[ -s $T/m.json.rank-0 && -s $T/m.json.rank-1 ]]'
check "the cluster report is written, and says it is partial" \
  '[[ -n $(ls "$T/rep" 2>/dev/null) ]] && grep -rqi "partial\|stopped" "$T/rep"'
check "the state is written" '[[ -s $T/st.json ]]'
check "no partial download or lock left in the cache" \
  '[[ -z $(ls -A "$c" | grep "\.zdc\.\(part\|lock\)") ]]'

finish
