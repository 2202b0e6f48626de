#!/usr/bin/env bash
# Prints the include folder of NVIDIA's cuDNN frontend (header-only C++),
# unpacked once from PyPI's nvidia-cudnn-frontend wheel into a cache outside
# the repository. CMake finds it there and then builds cuDNN's fused
# attention into the CUDA backend (kiln/cuda/attention_cudnn.cpp); cuDNN
# itself is loaded at run time, so a build without it runs everywhere.
#   KILN_CUDNN_FRONTEND_CACHE=~/.cache/kiln-cudnn-frontend (default)
set -euo pipefail
CACHE="${KILN_CUDNN_FRONTEND_CACHE:-$HOME/.cache/kiln-cudnn-frontend}"
VERSION=1.32.0
if [ ! -f "$CACHE/$VERSION/include/cudnn_frontend.h" ]; then
  echo "fetching nvidia-cudnn-frontend $VERSION's headers from PyPI into $CACHE (12 MB, once) ..." >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  # The wheels differ only in their Python module; the headers are the same in each.
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$VERSION" -d "$tmp" >&2
  mkdir -p "$CACHE/$VERSION"
  python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith('include/')])" "$tmp"/*.whl "$CACHE/$VERSION"
fi
echo "$CACHE/$VERSION/include"
