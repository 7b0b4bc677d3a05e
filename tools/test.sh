#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine:
#   tools/test.sh
# installs what is missing, then builds and runs the suite in four
# configurations: gcc (-Werror), clang (-Werror, build only), ASan+UBSan,
# and TSan on the threaded engine's tests.
# Set ZP_TEST_QUICK=1 to run the first configuration only.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh --slurm
J=${ZP_JOBS:-2}
summary=()

run_config() { # name, ctest args..., -- cmake args...
  local name=$1; shift
  local ctest_args=() cmake_args=()
  while [[ $# -gt 0 && $1 != -- ]]; do ctest_args+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  cmake_args=("$@")
  local dir=build/test-$name
  echo "=== [$name] configure + build"
  cmake -S . -B "$dir" -DZEPHON_WERROR=ON "${cmake_args[@]}" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j"$J" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; return 1; }
  if [[ ${#ctest_args[@]} -gt 0 && ${ctest_args[0]} == none ]]; then
    summary+=("$name: built with no warning"); return 0
  fi
  echo "=== [$name] ctest"
  ctest --test-dir "$dir" --output-on-failure -j"$J" "${ctest_args[@]}"
  summary+=("$name: passed")
}

mkdir -p build
run_config gcc -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++
# The Python package as a user installs it (README): `pip install ./python`
# into a fresh virtual environment that sees apt's numpy and torch; it builds
# and ships its own libzephon. Then its examples and API tests run from there.
echo "=== [python] pip install ./python into build/venv"
rm -rf build/venv python/build
/usr/bin/python3 -m venv --system-site-packages build/venv
build/venv/bin/pip install -q --no-build-isolation ./python >build/venv.log 2>&1 || { tail -30 build/venv.log; exit 1; }
(cd python/tests && ZEPHON_BIN="$PWD/../../build/test-gcc/zephon" \
   ../../build/venv/bin/python -m unittest test_examples test_api) >build/venv-tests.log 2>&1 ||
  { tail -40 build/venv-tests.log; exit 1; }
summary+=("python: pip install ./python into a venv, examples and API tests pass from it")
if [[ "${ZP_TEST_QUICK:-0}" != 1 ]]; then
  run_config clang none -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
  ZT_RESUME_STRIDE=5 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_config asan -LE nosan -- -DCMAKE_BUILD_TYPE=Debug -DZEPHON_SANITIZE=address \
      -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++
  # TSan on the threaded engine's tests and, label tsan, the shard cache on disk,
  # the transfers and the remote runs (their I/O, renewal and task threads). gcc's libgomp is not instrumented,
  # so the engine orders every hand-over between tasks with its own locks
  # (visible to TSan); no suppression is needed. LLVM's libomp 14 + Archer
  # is not used: it crashes when parallel regions with tasks are opened by
  # successive threads, as every pipeline's engine thread does (docs/design.md).
  ZT_RESUME_STRIDE=25 TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=1 exitcode=66" \
    run_config tsan -L "engine|tsan" -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZEPHON_SANITIZE=thread \
      -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++
  # libFuzzer targets (fuzz/, docs/fuzzing.md): built with clang, 15 s each
  echo "=== [fuzz] fuzz/run.sh 15"
  fuzz/run.sh 15
  summary+=("fuzz: every target of fuzz/run.sh, 15 s each, no failure")
fi
printf '%s\n' "${summary[@]}"
