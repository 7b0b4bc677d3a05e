#!/usr/bin/env bash
# Memory that does not grow with shard size (docs/datasets.md "Segments"),
# in one command:
#   bench/shardmem/run.sh [BUILD_DIR]   ROUNDS=N (default 3), BYTES (default 304M),
#                                       BIG_BYTES (default 1216M)
# Generates bench/out/shardmem: 8 shards of about 38 MB of JSONL each, as
# plain .jsonl, seekable .jsonl.zst (zephon gen's default) and single-frame
# .jsonl.zst (--single-frame). For each format, runs `zephon run` over one
# epoch (records, no tokenizer, --cache-mb 64) with whole shards
# (--segment-mb whole: how every shard was read before segments) and with
# segments (the default), at --block-shards 8 and 1, and prints the peak
# RSS (getrusage through /usr/bin/time, the best of ROUNDS), records/s and
# CPU seconds (user + system; steadier than records/s on a shared machine),
# the medians of ROUNDS, measured in the same run. Then the peak RSS of the
# seekable shards made 4x larger (BIG_BYTES), and the shuffle quality of
# block 8 with whole shards against rounds of segments, from
# --emit-ids (bench/shardmem/quality.py says what each figure means).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build}
R=${ROUNDS:-3}
BYTES=${BYTES:-304M}
if [[ ! -x $B/zephon ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$B" -j2 --target zephon_cli >/dev/null
fi
Z=$B/zephon
D=bench/out/shardmem
gen() { # DIR ARGS... (--bytes-override: BIG bytes instead of BYTES)
  local d=$1 bytes=$BYTES; shift
  if [[ ${1:-} == --bytes-override ]]; then bytes=$BIG; shift; fi
  if [[ ! -f $D/$d/manifest.json ]]; then
    mkdir -p "$D/$d"
    "$Z" gen --out "$D/$d" --shards 8 --bytes "$bytes" --seed 11 "$@" >/dev/null
  fi
}
gen plain --format jsonl
gen seekable
gen single --single-frame
echo "dataset: 8 shards, $(du -sh --apparent-size "$D/plain" | cut -f1) of JSONL;" \
     "seekable $(du -sh --apparent-size "$D/seekable" | cut -f1), single-frame" \
     "$(du -sh --apparent-size "$D/single" | cut -f1) stored"
echo
printf '%-10s %-9s %5s %10s %11s %9s\n' format reading block "peak MiB" "records/s" "CPU s"
for f in plain seekable single; do
  for mode in whole segments; do
    seg=(); [[ $mode == whole ]] && seg=(--segment-mb whole)
    for blk in 8 1; do
      rss=""; rates=(); cpus=()
      for ((i = 0; i < R; i++)); do
        out=$(/usr/bin/time -f 'RSS %M CPU %U %S' "$Z" run "$D/$f" --quiet --seed 5 --block-shards $blk \
                --cache-mb 64 "${seg[@]}" 2>&1)
        m=$(sed -n 's/^RSS \([0-9]*\) CPU.*/\1/p' <<<"$out")
        cpus+=("$(sed -n 's/^RSS [0-9]* CPU \([0-9.]*\) \([0-9.]*\)$/\1 \2/p' <<<"$out" | awk '{print $1 + $2}')")
        [[ -z $rss || $m -lt $rss ]] && rss=$m
        rates+=("$(sed -n 's/.* \([0-9.]*\) samples\/s.*/\1/p' <<<"$out")")
      done
      med=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n "$(( (R + 1) / 2 ))p")
      cpu=$(printf '%s\n' "${cpus[@]}" | sort -n | sed -n "$(( (R + 1) / 2 ))p")
      printf '%-10s %-9s %5s %10.0f %11.0f %9.2f\n' $f $mode $blk "$(awk -v k="$rss" 'BEGIN{print k/1024}')" \
        "$med" "$cpu"
    done
  done
done
echo
# Memory against shard size: the same 8 shards 4x larger (seekable only,
# one round each): whole shards grow with them, segments do not.
BIG=${BIG_BYTES:-1216M}
gen seekable-big --bytes-override
echo "seekable .jsonl.zst, block 8, 8 shards of $(du -sh --apparent-size "$D/seekable" | cut -f1)" \
     "and of $(du -sh --apparent-size "$D/seekable-big" | cut -f1) stored in all: peak MiB"
for mode in whole segments; do
  seg=(); [[ $mode == whole ]] && seg=(--segment-mb whole)
  line="$mode:"
  for d in seekable seekable-big; do
    m=$(/usr/bin/time -f 'RSS %M' "$Z" run "$D/$d" --quiet --seed 5 --block-shards 8 --cache-mb 64 \
          "${seg[@]}" 2>&1 | sed -n 's/^RSS \([0-9]*\)$/\1/p')
    line="$line $(( m / 1024 ))"
  done
  echo "  $line"
done
echo
echo "shuffle quality, block 8 (plain .jsonl; seekable and single-frame have the same order):"
for mode in whole segments; do
  seg=(); [[ $mode == whole ]] && seg=(--segment-mb whole)
  rm -rf "$D/ids-$mode"
  "$Z" run "$D/plain" --quiet --seed 5 --block-shards 8 "${seg[@]}" --emit-ids "$D/ids-$mode" >/dev/null
done
python3 bench/shardmem/quality.py "$D/ids-whole/rank-0.ids" "$D/ids-segments/rank-0.ids"
