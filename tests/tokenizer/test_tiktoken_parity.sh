#!/usr/bin/env bash
# test_tiktoken_parity.sh TOOL - ctest test_tiktoken_parity (label tokref):
# tests/tokenizer/tiktoken_parity.py with the references of tools/tokref.sh
# (installed when missing; the test fails when they cannot be).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$("$root/tools/tokref.sh" | tail -n 1)
exec "$dir/venv/bin/python" "$root/tests/tokenizer/tiktoken_parity.py" --tool "$1" --tokref "$dir" ${ZP_TOKREF_RANDOM:+--random "$ZP_TOKREF_RANDOM"}
