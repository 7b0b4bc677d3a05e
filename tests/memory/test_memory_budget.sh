#!/usr/bin/env bash
# test_memory_budget.sh ZEPHON PEAK_RSS - the memory budget bounds the peak
# resident set of `zephon run` (docs/pipeline.md, "Memory budget").
#
# On jsonl.zst, HDF5 and Megatron data, at 1 and 2 threads, with settings
# whose buffers would outgrow the budget (the default 1 GiB shard cache, which
# keeps every decoded shard or open Megatron mapping through the first of 2
# epochs: a run's last epoch keeps only the working set; large chunks with 16
# fetch tasks, whose automatic in-flight count holds 34 of them), the peak
# RSS (the child's ru_maxrss) is at most budget + ZP_MEMORY_OVERHEAD_BYTES
# with --memory-budget, and above it without: the bound is the budget's
# doing. The batches are the same with and without it (digests). A budget
# too small for the settings is an error at start that says what they need.
set -uo pipefail
Z=$1
RSS=$2
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fail=1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# the documented constant, from the public header
C_MIB=$(sed -n 's/.*define ZP_MEMORY_OVERHEAD_BYTES ((uint64_t)\([0-9]*\) << 20).*/\1/p' \
  "$HERE/../../include/zephon/memory.h")
[[ -n $C_MIB ]] || { echo "FAIL - ZP_MEMORY_OVERHEAD_BYTES not found in zephon/memory.h"; exit 1; }
C=$((C_MIB << 20))

"$Z" gen --out "$T/zst" --shards 64 --bytes 96M --format jsonl.zst --seed 5 >/dev/null ||
  { echo "FAIL - gen jsonl.zst"; exit 1; }
"$Z" preprocess --out "$T/mg" --format megatron "$T/zst" >/dev/null 2>&1 ||
  { echo "FAIL - preprocess megatron"; exit 1; }
have_h5=1
"$Z" gen --format h5 --out "$T/d.h5" --bytes 64M --features 64 >/dev/null 2>&1 || have_h5=0

# check NAME BUDGET_MIB ARGS...: with and without the budget, 1 and 2 threads
check() {
  local name=$1 m=$2 b=$(($2 << 20)); shift 2
  for th in 1 2; do
    local with="$T/$name.$th.with" without="$T/$name.$th.without"
    if ! "$RSS" "$with.rss" "$Z" run "$@" --threads "$th" --quiet --json \
        --memory-budget "${m}M" --emit-digest "$with.dig" >"$with.out" 2>"$with.err"; then
      bad "$name threads $th: the run under --memory-budget failed: $(cat "$with.err")"
      continue
    fi
    "$RSS" "$without.rss" "$Z" run "$@" --threads "$th" --quiet --json \
      --emit-digest "$without.dig" >"$without.out" 2>"$without.err" ||
      { bad "$name threads $th: the run without a budget failed: $(cat "$without.err")"; continue; }
    local pw pn
    pw=$(cat "$with.rss")
    pn=$(cat "$without.rss")
    if ((pw <= b + C)); then
      ok "$name threads $th: peak RSS $(mib "$pw") <= budget $(mib "$b") + $(mib "$C")"
    else
      bad "$name threads $th: peak RSS $(mib "$pw") > budget $(mib "$b") + $(mib "$C")"
    fi
    if ((pn > b + C)); then
      ok "$name threads $th: without the budget $(mib "$pn") (above the bound)"
    else
      bad "$name threads $th: without the budget $(mib "$pn"): the settings do not test the bound"
    fi
    if cmp -s "$with.dig" "$without.dig" && [[ -s $with.dig ]]; then
      ok "$name threads $th: the same batches ($(wc -l <"$with.dig"))"
    else
      bad "$name threads $th: the budget changed the batches"
    fi
    grep -q "\"memory\":{\"budget\":$b," "$with.out" ||
      bad "$name threads $th: the summary lacks the memory plan"
  done
}
# jsonl.zst: the shard cache holds every decoded shard (96 MB) without a
# budget, through the first of 2 epochs
check zst 16 "$T/zst" --tokenize gpt2 --microbatch 8 --block-shards 2 --epochs 2
# Megatron: the cache keeps every pair open, and their mapped pages count
check megatron 8 "$T/mg" --tokenize gpt2 --microbatch 8 --block-shards 2 --epochs 2
# HDF5: 34 in-flight chunks of 2048 records without a budget
if ((have_h5)); then
  check hdf5 24 "$T/d.h5" --microbatch 64 --chunk-samples 2048 --fetch-parallelism 16
else
  echo "skip - hdf5: this build reads no HDF5"
fi

# too small: an error at start naming the budget and what it needs
"$Z" run "$T/zst" --tokenize gpt2 --microbatch 8 --memory-budget 1M --quiet \
  >"$T/small.out" 2>"$T/small.err"
rc=$?
need=$(grep -o 'needs at least [0-9.]* [KMG]iB ([0-9]* bytes)' "$T/small.err")
if ((rc == 1)) && grep -q "memory_budget = 1.0 MiB (1048576 bytes): too small" "$T/small.err" &&
    [[ -n $need ]] && grep -q "shard cache" "$T/small.err" && [[ ! -s $T/small.out ]]; then
  ok "a budget too small: exit 1, $need"
else
  bad "a budget too small: exit $rc: $(cat "$T/small.err")"
fi
# ... and that need is enough
bytes=$(echo "$need" | sed 's/.*(\([0-9]*\) bytes)/\1/')
if [[ -n $bytes ]] && "$Z" run "$T/zst" --tokenize gpt2 --microbatch 8 --memory-budget "$bytes" \
    --quiet --max-batches 3 >/dev/null 2>"$T/need.err"; then
  ok "the budget it names ($bytes bytes) runs"
else
  bad "the budget it names ($bytes bytes) does not run: $(cat "$T/need.err")"
fi
# a size the option does not take
if "$Z" run "$T/zst" --memory-budget 12X >/dev/null 2>"$T/opt.err"; then
  bad "--memory-budget 12X accepted"
else
  grep -q "memory-budget '12X'" "$T/opt.err" && ok "--memory-budget 12X refused" ||
    bad "--memory-budget 12X: $(cat "$T/opt.err")"
fi
exit $fail
