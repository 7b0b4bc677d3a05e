#!/usr/bin/env bash
# test_tokenizer_hf (ctest, label tokref): Zephon's tokenizer.json tokenizers
# against Hugging Face tokenizers (tests/tokenizer/hf_parity.py). The
# references come from tools/tokref.sh; when they cannot be installed the
# test fails (it never skips).
#   test_hf_parity.sh TOK_DUMP
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$("$root/tools/tokref.sh" | tail -n 1)
exec "$dir/venv/bin/python" "$root/tests/tokenizer/hf_parity.py" "$dir" "$1" \
    "$root/tests/data/tokenizer/corpus.jsonl" --random "${ZP_HF_PARITY_RANDOM:-5000}"
