#!/usr/bin/env bash
# Configures and builds Kiln (Release) in build/. The CUDA backend is compiled
# whenever nvcc is found; the same binaries run on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)"
