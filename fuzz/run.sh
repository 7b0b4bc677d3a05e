#!/usr/bin/env bash
# fuzz/run.sh [SECONDS] [TARGET...] - build the libFuzzer targets (clang,
# ASan + UBSan) in build/fuzz and run each for SECONDS (default 20).
#
#   fuzz/run.sh            every target, 20 s each (what the test suite runs, with 15)
#   fuzz/run.sh 600        every target, 10 minutes each (a longer campaign)
#   fuzz/run.sh 60 manifest
#
# Each target starts from its seeds (fuzz/corpus/TARGET, never modified) and
# the inputs earlier runs found (build/fuzz/corpus/TARGET, kept between
# runs). A crash, a failed invariant, a leak, a timeout (10 s per input) or
# more than 2 GB of memory stops the target: the input is saved under
# build/fuzz/artifacts/TARGET/ and the script exits 1 after the other
# targets ran. Reproduce with: build/fuzz/fuzz_TARGET build/fuzz/artifacts/TARGET/crash-...
# See docs/fuzzing.md.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(shard_jsonl shard_zst shard_gz shard_segments manifest index_cache tokenizer_roundtrip
                                         tokenizer_files parquet)
for f in hdf5 megatron; do
  [[ ${#@} -gt 0 || ! -f fuzz/fuzz_shard_$f.c ]] || targets+=(shard_$f)
done
build=build/fuzz

command -v clang >/dev/null && command -v clang++ >/dev/null || {
    echo "fuzz/run.sh: clang is required (tools/deps.sh installs it)" >&2; exit 1; }

echo "=== [fuzz] configure + build $build"
if ! cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZEPHON_FUZZ=ON -DZEPHON_BUILD_TESTS=OFF \
        -DZEPHON_WITH_MPI=OFF -DZEPHON_WERROR=OFF > "$build.configure.log" 2>&1; then
    cat "$build.configure.log" >&2; exit 1
fi
tgts=()
for t in "${targets[@]}"; do tgts+=(--target "fuzz_$t"); done
if ! cmake --build "$build" "${tgts[@]}" -j"${ZP_JOBS:-2}" > "$build.build.log" 2>&1; then
    tail -50 "$build.build.log" >&2; exit 1
fi

declare -A max_len=([shard_jsonl]=65536 [shard_zst]=16384 [shard_gz]=16384 [shard_hdf5]=16384 [shard_megatron]=16384 [manifest]=4096 [index_cache]=2048
                    [tokenizer_roundtrip]=4096 [tokenizer_files]=4096 [parquet]=16384)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zephon-fuzz-run-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

run_one() { # target
    local t=$1 work=$build/corpus/$1 art=$build/artifacts/$1
    mkdir -p "$work" "$art" "$tmp/$t"
    TMPDIR=$tmp/$t ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        LSAN_OPTIONS=suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0 \
        "$build/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len="${max_len[$t]:-4096}" -print_final_stats=1 -artifact_prefix="$art/" \
        "$work" "fuzz/corpus/$t" > "$tmp/$t.log" 2>&1
    local rc=$?
    local stats
    stats=$(sed -n -e 's/^stat::number_of_executed_units: *\([0-9]*\)/\1 runs/p' \
                   -e 's/^stat::new_units_added: *\([0-9]*\)/\1 new inputs/p' "$tmp/$t.log" |
            paste -sd, -)
    if [[ $rc -eq 0 ]]; then
        echo "fuzz_$t: ok, ${secs} s, $stats, corpus $(ls "$work" | wc -l) + $(ls "fuzz/corpus/$t" | wc -l) seeds"
    else
        echo "fuzz_$t: FAILED (exit $rc); input saved in $art/; the end of its log:" >&2
        tail -60 "$tmp/$t.log" >&2
    fi
    return $rc
}

fails=0
for t in "${targets[@]}"; do run_one "$t" || fails=$((fails + 1)); done
if [[ $fails -gt 0 ]]; then
    echo "fuzz: $fails target(s) failed" >&2
    exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${secs} s without a failure"
