#!/usr/bin/env bash
# The Parquet reader's decode speed: makes the files with pyarrow
# (tools/pqref.sh) and runs bench_parquet on them (docs/formats.md, "Parquet").
# Usage: bench/parquet/run.sh [BUILD_DIR] [MB]   (default build, 64 MB of text)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
mb=${2:-64}
py=$(tools/pqref.sh | tail -n 1)/venv/bin/python
dir=$build/bench_parquet_files
[[ -f $dir/.mb && "$(cat "$dir/.mb")" == "$mb" ]] || {
  "$py" bench/parquet/make_bench.py "$dir" "$mb" && echo "$mb" > "$dir/.mb"; }
"$build/bench_parquet" -p 3 "$dir/text_plain.parquet" "$dir/text_dict.parquet" "$dir/ids.parquet"
