#!/usr/bin/env bash
# Independent Parquet writers and readers, for the Parquet tests and the
# format benchmark (docs/formats.md). Installs, only when missing, into one
# cache folder (never into the repository):
#   DIR/venv    a Python virtual environment from PyPI: pyarrow (the writer
#               of the Hugging Face hub), datasets (the hub's own library,
#               which writes through pyarrow with its own defaults), duckdb
#   DIR/npm     npm packages: hyparquet-writer, hyparquet and
#               hyparquet-compressors (a JavaScript writer and reader)
# Usage: tools/pqref.sh [DIR]   (default: $ZP_PQREF or build/pqref); concurrent
# calls wait for each other (flock). Prints DIR on its last line. Needs
# python3-venv, node and npm (tools/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-${ZP_PQREF:-build/pqref}}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
exec 9>"$DIR/.lock"
flock 9
PY_PINS=(pyarrow==26.0.1 duckdb==2.0.0 datasets==5.2.0)
NPM_PINS=(hyparquet@1.31.5 hyparquet-writer@0.17.0 hyparquet-compressors@1.1.2)
stamp_py="$DIR/venv/.zephon-pins"
if [[ ! -f $stamp_py || "$(cat "$stamp_py")" != "${PY_PINS[*]}" ]]; then
  rm -rf "$DIR/venv"
  python3 -m venv "$DIR/venv" >&2
  "$DIR/venv/bin/pip" install -q --disable-pip-version-check "${PY_PINS[@]}" >&2
  echo "${PY_PINS[*]}" > "$stamp_py"
fi
stamp_npm="$DIR/npm/.zephon-pins"
if [[ ! -f $stamp_npm || "$(cat "$stamp_npm")" != "${NPM_PINS[*]}" ]]; then
  rm -rf "$DIR/npm"
  mkdir -p "$DIR/npm"
  (cd "$DIR/npm" && echo '{"name":"zephon-pqref","private":true,"type":"module"}' > package.json &&
   npm install --silent --no-audit --no-fund "${NPM_PINS[@]}" >&2)
  echo "${NPM_PINS[*]}" > "$stamp_npm"
fi
echo "$DIR"
