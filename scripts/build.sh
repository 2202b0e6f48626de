#!/usr/bin/env bash
# Configures and builds Kiln (Release) in build/. The CUDA backend is compiled
# whenever nvcc is found; the same binaries run on machines without a GPU.
#   scripts/build.sh              everything: library, kiln, tests, fuzzers, benchmarks, Python module
#   scripts/build.sh kiln_cli     only the library and the kiln command (what scripts/setup.sh needs)
# ccache is used when installed (CMakeLists.txt), so a rebuild recompiles only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
# cuDNN's fused attention is compiled in where its frontend's headers are
# (PyPI, cached once outside the repository); without them it is left out and
# attention runs on Kiln's own kernels.
if command -v nvcc >/dev/null; then
  scripts/cudnn_frontend.sh >/dev/null || echo "build: no cuDNN frontend headers; attention will run on Kiln's own kernels" >&2
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-} >/dev/null
if [ $# -gt 0 ]; then
  cmake --build build -j "$(nproc)" --target "$@"
else
  cmake --build build -j "$(nproc)"
fi
