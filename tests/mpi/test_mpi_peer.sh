#!/usr/bin/env bash
# test_mpi_peer.sh ZEPHON MPIRUN - shards shared between nodes over MPI, on
# emulated nodes (docs/storage.md, "Shards from other nodes"), against the
# suite's nginx (fixture net), counting downloads in nginx's own access log:
#  1. 8 ranks as 4 and as 8 emulated nodes, 2 epochs, a cache limit that
#     holds the dataset: every sample once in each epoch, each shard
#     downloaded from storage exactly once in the whole job (without the
#     sharing each node downloads what it reads: about twice as many), the
#     rest received from other nodes (the cluster report says how many),
#     one cache folder per emulated node;
#  2. the same with a limit of a quarter of a node's share of the dataset:
#     every sample once, no shard downloaded more than twice in the 2
#     epochs, and the trace of downloads (ZEPHON_DEBUG=1) names each of
#     them with the read it is for: no shard downloaded twice for reads of
#     one epoch; then the two epochs as two jobs on one cache folder, so
#     that nginx's own log tells them apart: epoch 0 downloads each shard
#     exactly once, epoch 1 no shard more than once, and every shard epoch
#     1 did not download was in the cache epoch 0 left;
#  3. one emulated node's service stalls (never answers): the others time
#     out (0.5 s), download from storage themselves and finish, every
#     sample once, the report counting the failed requests.
set -u
Z=$(realpath "${1:?usage: test_mpi_peer.sh ZEPHON MPIRUN}"); MPIRUN=${2:-mpirun}
. "$(dirname "$0")/mpilib.sh"
. "$(dirname "$0")/../remote/common.sh"
PFX=mpipeer
LOG="$(netget ZT_DIR)/logs/nginx-access.log"
[[ -f $LOG ]] || { echo "FAIL - no nginx access log at $LOG"; exit 1; }

make_ds mpipeer 512 5
make_ds mpipeer-s 32 20
shard_bytes=$(cat "$ROOT"/mpipeer/*.jsonl.zst | wc -c)

# job NAME NODES DS ARGS...: 8 ranks as NODES emulated nodes; the access
# log lines of this run for the dataset DS are left in $T/NAME.log, the
# downloads per shard (count, then how many shards) in $T/NAME.counts. The
# cache folder is $T/NAME.cache, or $T/$CACHE.cache when CACHE is set.
job() {
  local name=$1 nodes=$2 ds=$3; shift 3
  local before; before=$(wc -l < "$LOG")
  ZEPHON_EMULATED_NODES=$nodes run -np 8 "$Z" run "$HTTP/$ds/manifest.json" --seed 5 --threads 1 \
    --microbatch 8 --cache-dir "$T/${CACHE:-$name}.cache" --report "$T/$name.rep" "$@" \
    > "$T/$name.out" 2> "$T/$name.err"
  local rc=$?
  sleep 0.2 # nginx writes its log line after the response
  tail -n +$((before + 1)) "$LOG" | grep -F "GET /$ds/shard-" > "$T/$name.log"
  awk '{print $7}' "$T/$name.log" | sort | uniq -c | awk '{print $1}' | sort -n | uniq -c \
    > "$T/$name.counts"
  return $rc
}
# epochs_once NAME N: the coverage certificate says every sample once in epochs 0..N-1
epochs_once() { [[ $(grep -c "every sample once" "$T/$1.out") -eq $2 ]]; }
# downloads NAME: the run's shard downloads from storage
downloads() { wc -l < "$T/$1.log"; }
# exactly_once NAME SHARDS: every shard downloaded once, none twice
exactly_once() { [[ $(awk '{print $7}' "$T/$1.log" | sort -u | wc -l) -eq $2 && $(downloads "$1") -eq $2 ]]; }
received() { sed -n 's/^between nodes: \([0-9.k]*\) shards.*/\1/p' "$T/$1.rep/report.txt"; }

for n in 4 8; do
  job hold$n $n mpipeer --epochs 2; rc=$?
  check "$n emulated nodes, 2 epochs, the cache holds the dataset (rc $rc)" '[[ $rc -eq 0 ]]' ||
    tail -5 "$T/hold$n.err"
  check "$n nodes: every sample once in each epoch" 'epochs_once hold$n 2'
  check "$n nodes: each of the 512 shards downloaded once in the job ($(downloads hold$n) downloads)" \
    'exactly_once hold$n 512'
  check "$n nodes: the others received from other nodes ($(received hold$n) in the report)" \
    '[[ -n $(received hold$n) && $(received hold$n) != 0 ]]'
  check "$n nodes: one cache folder per emulated node" \
    '[[ $(ls -d "$T/hold$n.cache"/node-* | wc -l) -eq $n ]]'
done

# the same job without the sharing: what it saves
ZEPHON_PEER=0 job alone 4 mpipeer --epochs 2
check "without the sharing the nodes download $(downloads alone) times (the sharing: $(downloads hold4))" \
  '[[ $(downloads alone) -gt $((512 * 3 / 2)) ]]'

# traced NAME: the trace's downloads (ZEPHON_DEBUG=1), one line each: the
# shard and the epoch of the read it is for (another node's, for a download
# it asked for: it asks ahead, so that may be the owner's next epoch)
traced() {
  sed -n "s/.*debug: download: shard '\([^']*\)' from storage.*, read at epoch \([0-9]*\) position.*/\1 \2/p" \
    "$T/$1.err"
}
# most_per_epoch NAME: the most downloads of one shard in one epoch, in the trace
most_per_epoch() { traced "$1" | sort | uniq -c | awk 'BEGIN {m = 0} $1 > m {m = $1} END {print m}'; }
# most NAME: the most downloads of one shard in the run, in nginx's log
most() { awk '{print $7}' "$T/$1.log" | sort | uniq -c | awk 'BEGIN {m = 0} $1 > m {m = $1} END {print m}'; }
# kept_or_downloaded NAME CACHE SHARDS: every shard either downloaded by the
# run NAME or in the cache folder $T/CACHE.cache (any node's) before it
kept_or_downloaded() {
  [[ $( { awk '{print $7}' "$T/$1.log" | sed 's#.*/##'
          sed 's#^[0-9a-f]*-##; s#\.zdc$##' "$T/$2.kept"; } | sort -u | wc -l) -eq $3 ]]
}

for n in 4 8; do
  lim=$((shard_bytes / n / 4))
  ZEPHON_DEBUG=1 job quarter$n $n mpipeer --epochs 2 --cache-limit "$lim"; rc=$?
  check "$n nodes, 2 epochs, limit a quarter of a node's share ($lim bytes; rc $rc)" '[[ $rc -eq 0 ]]' ||
    grep -v "debug:" "$T/quarter$n.err" | tail -5
  check "$n nodes, quarter limit: every sample once in each epoch" 'epochs_once quarter$n 2'
  check "$n nodes, quarter limit: $(downloads quarter$n) downloads of 512 shards in 2 epochs, none \
more than twice (downloads per shard, shards: $(tr -s ' \n' ' ' < "$T/quarter$n.counts"))" \
    '[[ $(awk "{print \$7}" "$T/quarter$n.log" | sort -u | wc -l) -eq 512 && $(most quarter$n) -le 2 ]]'
  check "$n nodes, quarter limit: the trace names every download and its read ($(traced quarter$n | wc -l) \
of $(downloads quarter$n)); most downloads of one shard for one epoch's reads: $(most_per_epoch quarter$n)" \
    '[[ $(traced quarter$n | wc -l) -eq $(downloads quarter$n) && $(most_per_epoch quarter$n) -eq 1 ]]'

  # the epochs as two jobs on one cache folder: nginx's log split between them
  CACHE=epochs$n job epoch0_$n $n mpipeer --epochs 1 --cache-limit "$lim"; rc0=$?
  find "$T/epochs$n.cache" -name '*-shard-*.zdc' -printf '%f\n' > "$T/epochs$n.kept"
  CACHE=epochs$n job epoch1_$n $n mpipeer --start-epoch 1 --epochs 1 --cache-limit "$lim"; rc1=$?
  check "$n nodes, quarter limit, the epochs as two jobs (rc $rc0, $rc1), every sample once in each" \
    '[[ $rc0 -eq 0 && $rc1 -eq 0 ]] && epochs_once epoch0_$n 1 && epochs_once epoch1_$n 1' ||
    tail -5 "$T/epoch0_$n.err" "$T/epoch1_$n.err"
  check "$n nodes, quarter limit, epoch 0: each of the 512 shards downloaded exactly once \
($(downloads epoch0_$n) downloads; per shard, shards: $(tr -s ' \n' ' ' < "$T/epoch0_$n.counts"))" \
    'exactly_once epoch0_$n 512'
  check "$n nodes, quarter limit, epoch 1: no shard downloaded more than once ($(downloads epoch1_$n) \
downloads; per shard, shards: $(tr -s ' \n' ' ' < "$T/epoch1_$n.counts"))" \
    '[[ $(most epoch1_$n) -le 1 ]]'
  check "$n nodes, quarter limit, epoch 1: every shard downloaded or kept by the cache from epoch 0 \
($(wc -l < "$T/epochs$n.kept") kept)" 'kept_or_downloaded epoch1_$n epochs$n 512'
done

# a stalled node: its service never answers
t0=$(date +%s)
ZEPHON_PEER_STALL_NODE=1 ZEPHON_PEER_TIMEOUT=0.5 job stall 4 mpipeer-s --epochs 2; rc=$?
secs=$(( $(date +%s) - t0 ))
check "node 1 stalls: the job finishes (rc $rc, $secs s)" '[[ $rc -eq 0 && $secs -lt 100 ]]' ||
  tail -5 "$T/stall.err"
check "node 1 stalls: every sample once in each epoch" 'epochs_once stall 2'
failed=$(sed -n 's/.*received from other nodes in [^,]*, \([0-9]*\) requests failed.*/\1/p' \
  "$T/stall.rep/report.txt")
check "node 1 stalls: the report counts the requests that timed out (${failed:-none})" \
  '[[ -n $failed && $failed -gt 0 ]]'
finish
