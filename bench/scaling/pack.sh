#!/usr/bin/env bash
# bench/scaling/pack.sh [BUNDLE] - build what bench/scaling/run.sh runs and
# put it, with every shared library it needs beyond the C library, into
# BUNDLE (default .scaling at the repository root, ignored by git), so that
# a machine with none of the project's dependencies installed (the 16-core
# machine some tasks are lent: no package registry reaches it) can run it:
#
#   bench/scaling/pack.sh                      # here: Release build, bundle
#   bash bench/scaling/run.sh .scaling         # there (carry .scaling)
#
# The build is Release with no tests and no MPI, for generic x86-64 (no
# -march): simdjson and the encoder pick their kernels at run time. The
# bundle is about 45 MB. The target's C library must be as new as this
# machine's (glibc 2.36 on Debian 12; Ubuntu 24.04 has 2.39).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:-$root/.scaling}
build=$root/build/scaling
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF \
        -DZEPHON_WITH_MPI=OFF >/dev/null
fi
cmake --build "$build" --target zephon_cli bench_e2e bench_floor_cli -j "$(nproc)" >/dev/null
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
bins=("$build/zephon" "$build/bench_e2e" "$build/bench_floor")
cp "${bins[@]}" "$bundle/bin/"
# every library the binaries load, but the C library's own (those come
# with any Linux system, and a copy of them would not match its loader)
for b in "${bins[@]}"; do
    ldd "$b" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
    case $(basename "$lib") in
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) ;;
        *) cp -L "$lib" "$bundle/lib/" ;;
    esac
done
strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/* 2>/dev/null || true
git -C "$root" rev-parse --short HEAD > "$bundle/commit" 2>/dev/null || echo unknown > "$bundle/commit"
echo "bundle: $bundle ($(du -sh "$bundle" | cut -f1), commit $(cat "$bundle/commit"))"
