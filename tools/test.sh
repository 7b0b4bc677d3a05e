#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine:
#   tools/test.sh
# installs what is missing, then builds and runs the suite in these
# configurations, each one a step:
#   release   gcc, CMAKE_BUILD_TYPE=Release (-O3), -Werror, every test: the
#             main run; optimisation-only warnings (-Wdangling-pointer, ...)
#             are errors here
#   default   a plain `cmake -DCMAKE_BUILD_TYPE=Release` with no other option
#             (tests included, ZEPHON_WERROR at its default, OFF), built: what a
#             user's own build does
#   python    `pip install ./python` into a fresh virtual environment, its
#             examples, API and Ctrl-C tests; sdist -> wheel -> install into a
#             venv of another CPython (pyenv's), its API and Ctrl-C tests
#   clang     clang, -Werror, built
#   asan      ASan+UBSan (Debug asserts, -O1), every test but those labelled nosan
#   tsan      TSan on the threaded engine's tests (labels engine, tsan)
#   fuzz      every fuzz target, 15 s each
# A failed step does not stop the others. Each step prints one line
# (PASS/FAIL, its time); the last line is "N passed, N failed", and the exit
# status is 1 when any step failed.
# Set ZP_TEST_QUICK=1 to run the release and python steps only.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh --slurm
J=${ZP_JOBS:-2}
summary=()
passed=0
failed=0

# step NAME WHAT COMMAND...: runs COMMAND, records one summary line
step() {
  local name=$1 what=$2; shift 2
  local t0=$SECONDS rc=0
  "$@" || rc=$?
  local dt=$((SECONDS - t0)) line
  printf -v line '%-4s %-8s %3dm%02ds  %s' "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" \
    "$name" $((dt / 60)) $((dt % 60)) "$what"
  [[ $rc -eq 0 ]] || line+=" (exit $rc: see above)"
  if [[ $rc -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  summary+=("$line")
  echo "=== $line"
}

# run_config NAME [ctest args... | none] -- cmake args...: configure, build
# and (unless "none") run ctest in build/test-NAME. Returns nonzero on the
# first failure (set -e does not apply inside a function called from step).
run_config() {
  local name=$1; shift
  local ctest_args=() cmake_args=()
  while [[ $# -gt 0 && $1 != -- ]]; do ctest_args+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  cmake_args=("$@")
  local dir=build/test-$name
  echo "=== [$name] configure + build"
  cmake -S . -B "$dir" -DZEPHON_WERROR=ON "${cmake_args[@]}" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j"$J" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; return 1; }
  if [[ ${#ctest_args[@]} -gt 0 && ${ctest_args[0]} == none ]]; then
    return 0
  fi
  echo "=== [$name] ctest"
  ctest --test-dir "$dir" --output-on-failure -j"$J" "${ctest_args[@]}" || return 1
}

# A user's own build with default options (README): nothing but the build
# type, the tests included. It must build with whatever warnings a compiler
# gives (ZEPHON_WERROR defaults to OFF).
default_build() {
  local dir=build/default-release
  echo "=== [default] cmake -S . -B $dir -DCMAKE_BUILD_TYPE=Release && cmake --build $dir"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j"$J" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; return 1; }
}

# The Python package as a user installs it (docs/python.md): plain
# `pip install ./python` (build isolation on: scikit-build-core from PyPI) into
# a fresh virtual environment of Debian's python3 that sees apt's numpy and
# torch; it builds and ships its own libzephon. Then, in a venv of another
# CPython (pyenv's when there is one, else Debian's without apt's packages:
# numpy from PyPI), the sdist is built, a wheel is built from the sdist alone
# and installed. The tests run from each install.
python_step() {
  local other vlog=build/venv.log
  echo "=== [python] pip install ./python into build/venv"
  rm -rf build/venv build/venv2 build/py-dist python/build
  /usr/bin/python3 -m venv --system-site-packages build/venv || return 1
  build/venv/bin/pip install -q ./python >$vlog 2>&1 || { tail -30 $vlog; return 1; }
  (cd python/tests && ZEPHON_BIN="$PWD/../../build/test-release/zephon" \
     ../../build/venv/bin/python -m unittest test_examples test_api test_interrupt test_masking) >build/venv-tests.log 2>&1 ||
    { tail -40 build/venv-tests.log; return 1; }
  other=$(pyenv which python3 2>/dev/null || echo /usr/bin/python3)
  echo "=== [python] sdist, wheel from the sdist, install into build/venv2 ($other, $("$other" -V 2>&1))"
  "$other" -m venv build/venv2 || return 1
  { build/venv2/bin/pip install -q build &&
    build/venv2/bin/python -m build --sdist --outdir build/py-dist ./python &&
    build/venv2/bin/pip wheel -q --no-deps -w build/py-dist build/py-dist/zephon-*.tar.gz &&
    build/venv2/bin/pip install -q build/py-dist/zephon-*.whl; } >build/venv2.log 2>&1 ||
    { tail -30 build/venv2.log; return 1; }
  (cd python/tests && ZEPHON_BIN="$PWD/../../build/test-release/zephon" \
     ../../build/venv2/bin/python -m unittest test_api test_interrupt test_masking) >build/venv2-tests.log 2>&1 ||
    { tail -40 build/venv2-tests.log; return 1; }
}

mkdir -p build
# The main run: Release (-O3, as tools/demo.sh and users build) with every
# test and -Werror. It replaced a RelWithDebInfo (-O2 -g) run: gcc 12 gives
# some warnings (-Wdangling-pointer) only at -O3, and the suite's time on
# 2 cores has room for one full gcc run, not two.
step release "gcc Release (-O3) -Werror, every test" \
  run_config release -- -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++
step default "plain default cmake Release build, tests included, no -Werror" default_build
step python "pip install ./python (Debian python3 venv), sdist -> wheel -> install (pyenv CPython venv), tests pass from both" python_step
if [[ "${ZP_TEST_QUICK:-0}" != 1 ]]; then
  step clang "clang -Werror, built" \
    run_config clang none -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
  # `zephon run --report` without mpirun never initialises MPI (a world of
  # one without MPI, docs/mpi.md): no MPI singleton runs under LeakSanitizer.
  # -O1, as the sanitizers' own documentation advises: the step ran 14.5 of
  # the suite's 30 minutes at -O0; at -O1 the heaviest tests take about
  # two thirds of that, with the same checks (asserts stay on: Debug).
  ZT_RESUME_STRIDE=5 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    step asan "ASan+UBSan (Debug, -O1), every test but label nosan" \
    run_config asan -LE nosan -- -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
      -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" -DZEPHON_SANITIZE=address \
      -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++
  # TSan on the threaded engine's tests and, label tsan, the shard cache on disk,
  # the transfers and the remote runs (their I/O, renewal and task threads). gcc's libgomp is not instrumented,
  # so the engine orders every hand-over between tasks with its own locks
  # (visible to TSan); no suppression is needed. LLVM's libomp 14 + Archer
  # is not used: it crashes when parallel regions with tasks are opened by
  # successive threads, as every pipeline's engine thread does (docs/design.md).
  ZT_RESUME_STRIDE=25 TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=1 exitcode=66" \
    step tsan "TSan, labels engine and tsan" \
    run_config tsan -L "engine|tsan" -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZEPHON_SANITIZE=thread \
      -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++
  # libFuzzer targets (fuzz/, docs/fuzzing.md): built with clang, 15 s each
  echo "=== [fuzz] fuzz/run.sh 15"
  step fuzz "every target of fuzz/run.sh, 15 s each" fuzz/run.sh 15
fi
echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
