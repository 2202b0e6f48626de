#!/usr/bin/env bash
# Command 2 of the README: install what is missing, build, run every test.
# GPU tests (label `gpu`) report as skipped on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
# The external references the suite checks Kiln against (transformers,
# tokenizers, peft, the openai client, torchrun: PyTorch 2 from PyPI, made
# once into a cache; docs/TESTING.md). A test that needs one fails without
# it: no KILN_ORACLES=optional here.
start=$SECONDS
echo "test: the PyTorch 2 environment with transformers, tokenizers, peft and openai (bench/torch2_venv.sh;" \
     "a few minutes the first time, cached after) ..."
bench/torch2_venv.sh >/dev/null
echo "test: ready in $((SECONDS - start)) s"
export KILN_ORACLES=required
cd build
# Tests that compare with PyTorch fail, rather than skip, without it here.
export KILN_REQUIRE_TORCH=1
status=0
ctest --output-on-failure -j "$(nproc)" "$@" || status=$?
echo "test: $(ctest -N -L oracle "$@" | sed -n 's/^Total Tests: //p') of them checked Kiln against an external" \
     "reference (ctest -L oracle: transformers, tokenizers, peft, the openai client, torchrun), none skipped"
exit $status
