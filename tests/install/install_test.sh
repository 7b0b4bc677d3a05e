#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR - an installed copy works where it lands.
#
#  1. The README's "Using the library" code block is the marked part of
#     examples/readme.c.
#  2. `cmake --install BUILD_DIR --prefix P` into a temporary P; zephon.pc
#     resolves into P (no configure-time prefix left in it).
#  3. examples/readme.c builds against P with pkg-config and with
#     find_package(zephon), links P's libzephon, and runs on a tiny dataset
#     made by P's `zephon gen`.
#  4. P moved to another folder: zephon.pc and the CMake package now point
#     into the new folder, and both builds work again from there.
# Environment: CC (default cc), CMAKE (default cmake).
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cc=${CC:-cc}
cmake_bin=${CMAKE:-cmake}
work=$(mktemp -d "${TMPDIR:-/tmp}/zp-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $*"; }

# ------------------------------------------------ 1. README == examples/readme.c
step "README example matches examples/readme.c"
awk '/^## Using the library/ {f = 1} f && /^```c/ {g = 1; next} g && /^```/ {exit} g {print}' \
  "$src/README.md" >"$work/readme.block"
[[ -s $work/readme.block ]] || fail "no C code block under '## Using the library' in README.md"
# The marked regions of readme.c, joined by one blank line.
awk '/README: begin/ {g = 1; if (n++) print ""; next} /README: end/ {g = 0; next} g {print}' \
  "$src/examples/readme.c" >"$work/readme.c.block"
diff -u "$work/readme.block" "$work/readme.c.block" ||
  fail "README.md's example and examples/readme.c differ (diff above)"

# ------------------------------------------------------------------ 2. install
P=$work/prefix
step "cmake --install $build --prefix $P"
"$cmake_bin" --install "$build" --prefix "$P" >"$work/install.log" 2>&1 || {
  cat "$work/install.log"; fail "cmake --install"; }
pc=$(find "$P" -name zephon.pc -path '*/pkgconfig/*' | head -n1)
[[ -n $pc ]] || fail "no zephon.pc installed under $P"
configured_prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
if [[ -n $configured_prefix ]] && grep -qF "$configured_prefix" "$pc"; then
  fail "$pc names the configure-time prefix $configured_prefix"
fi

# Checks that pkg-config, reading zephon.pc from PCDIR, points into ROOT.
check_pc() { # pcdir root
  local pcdir=$1 root rdir v
  root=$(readlink -f "$2")
  for v in prefix libdir includedir; do
    rdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=$v zephon)
    [[ -d $rdir ]] || fail "pkg-config --variable=$v gives '$rdir', not a folder"
    [[ $(readlink -f "$rdir") == "$root"* ]] || fail "pkg-config $v '$rdir' is not under $root"
  done
  [[ -f $(PKG_CONFIG_PATH=$pcdir pkg-config --variable=includedir zephon)/zephon.h ]] ||
    fail "no zephon.h in pkg-config's includedir"
  ls "$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir zephon)"/libzephon.* >/dev/null ||
    fail "no libzephon in pkg-config's libdir"
}
check_pc "$(dirname "$pc")" "$P"

# ------------------------------------------------------- 3. build and run
mkdir -p "$work/run"
step "zephon gen (installed command)"
"$P/bin/zephon" gen --out "$work/run/data" --shards 2 --samples-per-shard 100 --format jsonl.zst \
  >"$work/gen.log" 2>&1 || { cat "$work/gen.log"; fail "zephon gen"; }

# Runs program EXE in the dataset folder and checks it used ROOT's libzephon.
run_readme() { # exe root
  local exe=$1 root out lib
  root=$(readlink -f "$2")
  lib=$(ldd "$exe" | awk '/libzephon\.so/ {print $3}')
  [[ -n $lib && $(readlink -f "$lib") == "$root"/* ]] ||
    fail "$exe links libzephon from '$lib', not from $root"
  out=$(cd "$work/run" && "$exe") || fail "$exe failed: $out"
  echo "$out"
  [[ $out == *" batches, "*" tokens" ]] || fail "unexpected output from $exe: $out"
}

build_pc() { # pcdir exe root
  local pcdir=$1 exe=$2 libdir
  libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir zephon)
  step "build with pkg-config ($pcdir)"
  # shellcheck disable=SC2046
  "$cc" -std=c11 -Wall -Wextra -Werror -o "$exe" "$src/examples/readme.c" \
    $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs zephon) -Wl,-rpath,"$libdir" ||
    fail "pkg-config build"
  run_readme "$exe" "$3"
}

build_cmake() { # prefix builddir
  local prefix=$1 bdir=$2
  step "build with find_package(zephon) (CMAKE_PREFIX_PATH=$prefix)"
  mkdir -p "$work/cm"
  cat >"$work/cm/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.20)
project(zephon_consumer C)
find_package(zephon 0.1 REQUIRED)
add_executable(readme "$src/examples/readme.c")
set_target_properties(readme PROPERTIES C_STANDARD 11)
target_compile_options(readme PRIVATE -Wall -Wextra -Werror)
target_link_libraries(readme PRIVATE zephon::zephon)
EOF
  "$cmake_bin" -S "$work/cm" -B "$bdir" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" >"$bdir.log" 2>&1 || { cat "$bdir.log"; fail "configure with find_package"; }
  local dir
  dir=$(sed -n 's/^zephon_DIR:PATH=//p' "$bdir/CMakeCache.txt")
  [[ $(readlink -f "$dir") == "$(readlink -f "$prefix")"/* ]] ||
    fail "find_package found zephon in '$dir', not under $prefix"
  "$cmake_bin" --build "$bdir" >>"$bdir.log" 2>&1 || { cat "$bdir.log"; fail "build with find_package"; }
  run_readme "$bdir/readme" "$prefix"
}

build_pc "$(dirname "$pc")" "$work/readme_pc" "$P"
build_cmake "$P" "$work/cm-build"

# ------------------------------------------------------------------ 4. move
P2=$work/elsewhere/zephon
mkdir -p "$work/elsewhere"
step "move $P -> $P2"
mv "$P" "$P2"
pc2=${pc/#$P/$P2}
check_pc "$(dirname "$pc2")" "$P2"
build_pc "$(dirname "$pc2")" "$work/readme_pc2" "$P2"
build_cmake "$P2" "$work/cm-build2"
echo "install test passed"
