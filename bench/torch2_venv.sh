#!/usr/bin/env bash
# The PyTorch users install today (2.x from PyPI), with transformers,
# tokenizers and safetensors (the oracles for Hugging Face models:
# tests/hf/make_fixtures.py; gguf and protobuf for their tokenizer
# converters), peft, sentence-transformers (the embeddings' oracle), the openai, ollama and anthropic clients (the
# chat APIs' tests drive kiln serve with them), in a virtual environment outside the
# repository, made once and cached; jsonschema validates constrained
# answers. Prints its python.
#   KILN_TORCH2_VENV=~/.cache/kiln-torch2 (default)
set -euo pipefail
VENV="${KILN_TORCH2_VENV:-$HOME/.cache/kiln-torch2}"
if ! "$VENV/bin/python" -c "import torch, transformers, tokenizers, safetensors, sentencepiece, openai, peft, google.protobuf" 2>/dev/null; then
  echo "creating $VENV with PyTorch 2 and transformers from PyPI (a few GB, once) ..." >&2
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch numpy transformers tokenizers safetensors sentencepiece gguf protobuf openai peft \
    sentence-transformers >&2
fi
# jsonschema (validating constrained answers: cli.hf_grammar) came later: added to a venv made before it.
if ! "$VENV/bin/python" -c "import jsonschema" 2>/dev/null; then
  "$VENV/bin/pip" install -q jsonschema >&2 || echo "could not install jsonschema into $VENV" >&2
fi
# The ollama client (Ollama's API's tests drive kiln serve with it: cli.hf_ollama_api) came later, likewise.
if ! "$VENV/bin/python" -c "import ollama" 2>/dev/null; then
  "$VENV/bin/pip" install -q ollama >&2 || echo "could not install the ollama client into $VENV" >&2
fi
# So did the anthropic client (the Messages API's test: cli.hf_anthropic_api).
if ! "$VENV/bin/python" -c "import anthropic" 2>/dev/null; then
  "$VENV/bin/pip" install -q anthropic >&2 || echo "could not install the anthropic client into $VENV" >&2
fi
# sentence-transformers came later (the embedding fixtures): added to a venv made before it.
if ! "$VENV/bin/python" -c "import sentence_transformers" 2>/dev/null; then
  "$VENV/bin/pip" install -q sentence-transformers >&2 || echo "could not install sentence-transformers into $VENV" >&2
fi
echo "$VENV/bin/python"
