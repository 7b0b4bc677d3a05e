#!/usr/bin/env bash
# gzip shards against .jsonl.zst and the command-line decoders, one run:
#   bench/gzip/run.sh [BUILD_DIR] [MB]
# Generates (once) MB megabytes of JSONL (default 200) in 4 shards under
# bench/out/gzip-data, compressed as .jsonl.gz (gzip -6) and .jsonl.zst
# (zstd -3, one frame), then prints, from the page cache:
#   1. the inflate libraries on one .jsonl.gz shard (bench_gz_libs: zlib,
#      ISA-L igzip, libdeflate), decoded MB/s: the decoder choice;
#   2. decode MB/s (of JSONL) of `zcat`, `pigz -dc -p 1` (when installed)
#      and `zstd -dc` over all shards to /dev/null, and of Zephon's
#      whole-shard reader (`zephon index`: decode + line index of every
#      shard, one thread) for .jsonl.gz and .jsonl.zst, best of 3;
#   3. `zephon run` without tokenize, 1 thread: records/s and MB/s for each,
#      whole shards and the default segments, best of 3;
#   4. the ratios gzip / zst.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
MB=${2:-200}
if [[ ! -x $B/zephon || ! -x $B/bench_gz_libs ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
  cmake --build "$B" -j2 --target zephon_cli bench_gz_libs >/dev/null
fi
Z=$B/zephon
D=bench/out/gzip-data
if [[ ! -f $D/done-$MB ]]; then
  rm -rf "$D"
  "$Z" gen --out "$D/plain" --format jsonl --shards 4 --bytes "${MB}M" --seed 1 >/dev/null
  rm -f "$D/plain/manifest.json"
  mkdir -p "$D/gz" "$D/zst"
  for f in "$D"/plain/*.jsonl; do
    b=$(basename "$f")
    gzip -6 -c "$f" > "$D/gz/$b.gz"
    zstd -q -3 --single-thread -c "$f" > "$D/zst/$b.zst"
  done
  touch "$D/done-$MB"
fi
plain=$(cat "$D"/plain/*.jsonl | wc -c)
gzb=$(cat "$D"/gz/*.gz | wc -c)
zsb=$(cat "$D"/zst/*.zst | wc -c)
cat "$D"/gz/* "$D"/zst/* >/dev/null # page cache
# the best of 3 (the development VMs are shared and noisy)
secs() {
  local best="" t0 t1 t
  for _ in 1 2 3; do
    t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N)
    t=$(python3 -c "print($t1-$t0)")
    best=$(python3 -c "print(min($t, ${best:-$t}))")
  done
  echo "$best"
}
echo "dataset: $(python3 -c "print(f'{$plain/1e6:.0f} MB of JSONL, .jsonl.gz {$gzb/1e6:.0f} MB (gzip -6), .jsonl.zst {$zsb/1e6:.0f} MB (zstd -3)')")"
echo "--- 1. inflate libraries, one shard (decoded MB/s, best of 3)"
"$B/bench_gz_libs" "$(ls "$D"/gz/*.gz | head -1)" 3
echo "--- 2. decode, all shards, 1 thread (best of 3)"
t_zcat=$(secs sh -c "zcat $D/gz/*.gz")
t_pigz=""
command -v pigz >/dev/null && t_pigz=$(secs sh -c "pigz -dc -p 1 $D/gz/*.gz")
t_zstd=$(secs sh -c "zstd -dc $D/zst/*.zst")
t_igz=$(secs "$Z" index -o "$D/gz.json" "$D/gz")
t_izs=$(secs "$Z" index -o "$D/zst.json" "$D/zst")
r=()
for d in gz zst; do
  for seg in whole 2; do
    best=""
    for _ in 1 2 3; do # the run of most records/s of 3
      x=$("$Z" run "$D/$d.json" --quiet --json --threads 1 --microbatch 32 --segment-mb $seg)
      best=$(python3 -c "import json,sys; a,b=(json.loads(s) for s in sys.argv[1:]); print(json.dumps(a if a['samples_per_s']>=b['samples_per_s'] else b))" "$x" "${best:-$x}")
    done
    r+=("$best")
  done
done
python3 - "$plain" "$t_zcat" "${t_pigz:-0}" "$t_zstd" "$t_igz" "$t_izs" "${r[@]}" <<'PY'
import json, sys
plain = int(sys.argv[1]); t = [float(x) for x in sys.argv[2:7]]
zcat, pigz, zstd, igz, izs = (plain / x / 1e6 if x else 0 for x in t)
print(f"zcat > /dev/null:                      {zcat:8.1f} MB/s")
print(f"pigz -dc -p 1 > /dev/null:             {pigz:8.1f} MB/s" if pigz else
      "pigz -dc:                              not installed")
print(f"zstd -dc > /dev/null:                  {zstd:8.1f} MB/s")
print(f"zephon index, .jsonl.gz (ISA-L):       {igz:8.1f} MB/s  ({igz / zcat:.2f} x zcat)")
print(f"zephon index, .jsonl.zst:              {izs:8.1f} MB/s  (gz / zst {igz / izs:.2f})")
print("--- 3. zephon run, no tokenize, 1 thread (best of 3)")
runs = [json.loads(x) for x in sys.argv[7:11]]
names = ["gz, whole shards", "gz, segments of 2 MiB", "zst, whole shards", "zst, segments of 2 MiB"]
for n, r in zip(names, runs):
    print(f"{n:24s} {r['samples_per_s']:10.0f} records/s {r['mb_per_s']:8.1f} MB/s")
print(f"ratio gz / zst records/s: whole {runs[0]['samples_per_s'] / runs[2]['samples_per_s']:.2f}, "
      f"segments {runs[1]['samples_per_s'] / runs[3]['samples_per_s']:.2f}")
PY
