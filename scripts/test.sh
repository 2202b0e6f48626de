#!/usr/bin/env bash
# Command 2 of the README: install what is missing, build, run every test.
# GPU tests (label `gpu`) report as skipped on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
cd build
# Tests that compare with PyTorch fail, rather than skip, without it here.
export KILN_REQUIRE_TORCH=1
ctest --output-on-failure -j "$(nproc)" "$@"
