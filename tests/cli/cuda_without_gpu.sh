#!/usr/bin/env bash
# --device cuda without a GPU: a clear message and status 1. Where a GPU
# exists the run works, and the test reports as skipped.
source "$(dirname "$0")/lib.sh"
"$KILN" train fashion-mlp --steps 1 --device cuda --no-progress --out "$WORK/cuda" >"$OUT" 2>&1
if grep -q "device: cuda:0" "$OUT"; then
  echo "SKIPPED: this machine has a GPU"
  exit 0
fi
run 1 "$KILN" train fashion-mlp --steps 1 --device cuda --no-progress --out "$WORK/cuda"
expect "kiln: error: .*CUDA is not available.*Run with --device cpu"
echo "ok"
