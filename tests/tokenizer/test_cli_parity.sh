#!/usr/bin/env bash
# test_tokenize_cli_parity (ctest, label tokref): `zephon tokenize --tokenizer
# X docs.jsonl` against the references (tests/tokenizer/cli_parity.py). The
# references come from tools/tokref.sh; the test fails when they cannot be
# installed (it never skips).
#   test_cli_parity.sh ZEPHON
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$("$root/tools/tokref.sh" | tail -n 1)
exec "$dir/venv/bin/python" "$root/tests/tokenizer/cli_parity.py" "$dir" "$1" "$root"
