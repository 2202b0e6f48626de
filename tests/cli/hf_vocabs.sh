#!/usr/bin/env bash
# Real tokenizer vocabularies against `tokenizers`, and llama.cpp's as GGUF files
# against their models' own ids (tests/hf/test_vocab_corpus.cpp).
# Makes the corpus once, in a cache: llama.cpp's test vocabularies from PyPI's
# llama-cpp-python source package (scripts/llama_cpp_source.sh), converted by
# transformers in the PyTorch 2 environment (bench/torch2_venv.sh: required).
#   KILN_VOCAB_CORPUS=~/.cache/kiln-vocabs (default)
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CORPUS="${KILN_VOCAB_CORPUS:-$HOME/.cache/kiln-vocabs}"
require_oracle tokenizers transformers gguf sentencepiece google.protobuf
SRC="$(made_once "$ROOT/scripts/llama_cpp_source.sh")" || fail "could not get llama.cpp's sources"
made_once "$ORACLE_PY" "$ROOT/tests/hf/make_vocab_fixtures.py" "$SRC/models" "$CORPUS" || fail "could not make the corpus"
KILN_VOCAB_CORPUS="$CORPUS" KILN_LLAMA_CPP_MODELS="$SRC/models" "$KILN_VOCAB_TESTS" --gtest_brief=1 || fail "a vocabulary tokenizes differently"
echo "ok"
