#!/usr/bin/env bash
# Prints the path of llama.cpp's source tree, unpacked from PyPI's
# llama-cpp-python source package (which vendors it) into a cache outside
# the repository, once. Its models/templates holds the chat templates of
# real models; convert_hf_to_gguf.py and the ggml-vocab-*.gguf files are there too.
#   KILN_LLAMA_CPP_CACHE=~/.cache/kiln-llama-cpp (default)
set -euo pipefail
CACHE="${KILN_LLAMA_CPP_CACHE:-$HOME/.cache/kiln-llama-cpp}"
if ! ls -d "$CACHE"/llama_cpp_python-*/vendor/llama.cpp/models/templates >/dev/null 2>&1; then
  echo "fetching llama-cpp-python's source package from PyPI into $CACHE (80 MB, once) ..." >&2
  mkdir -p "$CACHE"
  tmp="$(mktemp -d)"
  # pip prepares the package's metadata too (its build backend, in an isolated environment): a minute or two.
  python3 -m pip download -q --no-deps --no-binary :all: llama-cpp-python -d "$tmp" >&2
  tar xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$CACHE"
  rm -rf "$tmp"
fi
ls -d "$CACHE"/llama_cpp_python-*/vendor/llama.cpp | sort -V | tail -1
