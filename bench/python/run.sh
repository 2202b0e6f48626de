#!/usr/bin/env bash
# Kiln from Python beside `kiln train` and PyTorch, in one run (docs/PERFORMANCE.md):
# bench/python/python_speed.py under Debian's Python (PyTorch 1.13), then under
# the PyTorch 2 venv (bench/torch2_venv.sh) when it exists.
#   bench/python/run.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${1:-build}"
STEPS="${2:-600}"
export PYTHONPATH="$PWD/$BUILD/python"
/usr/bin/python3 bench/python/python_speed.py "$BUILD/kiln" "$STEPS"
TORCH2="${KILN_TORCH2_VENV:-$HOME/.cache/kiln-torch2}/bin/python"
if [ -x "$TORCH2" ]; then
  "$TORCH2" bench/python/python_speed.py "$BUILD/kiln" "$STEPS"
fi
