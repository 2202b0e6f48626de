#!/usr/bin/env bash
# Real tokenizer vocabularies against `tokenizers` (tests/hf/test_vocab_corpus.cpp).
# Makes the corpus once, in a cache: llama.cpp's test vocabularies from PyPI's
# llama-cpp-python source package (scripts/llama_cpp_source.sh), converted by
# transformers in the PyTorch 2 environment (bench/torch2_venv.sh, made if missing).
#   KILN_VOCAB_CORPUS=~/.cache/kiln-vocabs (default)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CORPUS="${KILN_VOCAB_CORPUS:-$HOME/.cache/kiln-vocabs}"
PY="$("$ROOT/bench/torch2_venv.sh")"
SRC="$("$ROOT/scripts/llama_cpp_source.sh")"
"$PY" "$ROOT/tests/hf/make_vocab_fixtures.py" "$SRC/models" "$CORPUS"
KILN_VOCAB_CORPUS="$CORPUS" "$KILN_VOCAB_TESTS" --gtest_brief=1
