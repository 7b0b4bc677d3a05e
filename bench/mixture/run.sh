#!/usr/bin/env bash
# The mixture's selection cost (bench_mixture.c): ns per draw of the
# sequential cursor, per seek, per counts(), for 3 and 1000 parts.
#   bench/mixture/run.sh [BUILD_DIR] [DRAWS]    (DRAWS: default 10^7)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/release}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DZEPHON_BUILD_TESTS=OFF >/dev/null
cmake --build "$B" -j2 --target bench_mixture >/dev/null
"$B/bench_mixture" ${2:-}
