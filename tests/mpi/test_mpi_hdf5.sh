#!/usr/bin/env bash
# test_mpi_hdf5.sh ZEPHON MPIRUN - one HDF5 file shared by every rank:
#  1. at 1, 2, 3 and 4 ranks, with the MPI-IO driver (parallel HDF5) and
#     with the serial one, the ranks' samples of an epoch (shuffled, 1001
#     records: the ranks' shares are padded) are every record exactly once
#     (--emit-samples, padding left out), in record mode (text rows and the
#     [rows, F] features / [rows] label arrays);
#  2. MPI-IO and serial reads give the same batches on every rank
#     (--emit-digest hashes the arrays too);
#  3. pad packing with tokenize over the same file: exactly once too;
#  4. the cluster report lists the ranks' on-demand reads and HDF5 lock wait;
#  5. --h5-driver with a bad value is a usage error.
set -u
Z=$(realpath "${1:?usage: test_mpi_hdf5.sh ZEPHON MPIRUN}")
MPIRUN=${2:-mpirun}
. "$(dirname "$0")/mpilib.sh"

"$Z" gen --format h5 --out "$T/f.h5" --shards 1 --samples-per-shard 1001 --features 8 --seed 2 \
  > "$T/gen.out" 2>&1 || { echo "FAIL - gen h5"; cat "$T/gen.out"; exit 1; }
common=(--data "$T/f.h5" --seed 3 --microbatch 7 --threads 2 --quiet)

# the epoch-0 samples (shard:record) of the non-padded rows, sorted
ids() { cat "$@" | awk '$2 == 0 && $5 == 0 {print $6}' | sort; }

for np in 1 2 3 4; do
  for drv in mpio serial; do
    d="$T/n$np-$drv"; mkdir -p "$d"
    run -np $np "$Z" run "${common[@]}" --h5-driver $drv --emit-samples "$d/s" \
      --emit-digest "$d/digest" > "$d/out" 2> "$d/err"; rc=$?
    check "$np rank(s), $drv: the run succeeds (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/err"
    ids "$d"/s/rank-*.samples > "$d/ids"
    check "$np rank(s), $drv: 1001 records, each exactly once ($(wc -l < "$d/ids") delivered, $(uniq -d "$d/ids" | wc -l) repeated)" \
      '[[ $(wc -l < "$d/ids") -eq 1001 && $(uniq -d "$d/ids" | wc -l) -eq 0 && $(uniq "$d/ids" | wc -l) -eq 1001 ]]'
  done
  a=$(cat "$T/n$np-mpio"/digest* 2>/dev/null | sort | xxd -p | head -c 64)
  check "$np rank(s): MPI-IO and serial reads give the same batches (digests)" \
    'diff <(cat "$T/n$np-mpio"/digest* | sort) <(cat "$T/n$np-serial"/digest* | sort) >/dev/null && [[ -n "$a" ]]'
done

# 3. pad packing with tokenize: text from HDF5, one document per row
d="$T/pad"; mkdir -p "$d"
run -np 3 "$Z" run "${common[@]}" --h5-driver mpio --tokenize gpt2 --pack pad --seq-len 63 \
  --emit-samples "$d/s" > "$d/out" 2> "$d/err"; rc=$?
check "pad packing over HDF5 text at 3 ranks (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/err"
ids "$d"/s/rank-*.samples > "$d/ids"
check "pad packing: 1001 documents, each exactly once" \
  '[[ $(wc -l < "$d/ids") -eq 1001 && $(uniq -d "$d/ids" | wc -l) -eq 0 ]]'

# 4. the report
d="$T/rep"; mkdir -p "$d"
run -np 2 "$Z" run "${common[@]}" --h5-driver mpio --report "$d/r" > "$d/out" 2> "$d/err"; rc=$?
check "2 ranks with --report (rc $rc)" '[[ $rc -eq 0 ]]' || tail -5 "$d/err"
check "report.txt lists the on-demand reads" 'grep -q "on-demand reads" "$d"/r/*.txt'
cat > "$T/rep.py" <<'PYEOF'
import glob, json, sys
d = json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))
r = d["ranks"]
sys.exit(0 if len(r) == 2 and all(x["ondemand_reads"] > 0 and "hdf5_lock_wait_s" in x for x in r) else 1)
PYEOF
check "report.json: every rank's ondemand_reads > 0, with hdf5_lock_wait_s" 'python3 "$T/rep.py" "$d/r"'

# 5. usage
"$Z" run "${common[@]}" --h5-driver fast > /dev/null 2> "$T/u.err"; rc=$?
check "--h5-driver fast: usage error (exit 2) naming the choices" '[[ $rc -eq 2 ]] && grep -q "auto, mpio or serial" "$T/u.err"'
"$Z" run "${common[@]}" --h5-driver mpio > /dev/null 2> "$T/u2.err"; rc=$?
check "--h5-driver mpio without mpirun: refused (exit 2) saying why" '[[ $rc -eq 2 ]] && grep -q "MPI-IO needs" "$T/u2.err"'
finish
