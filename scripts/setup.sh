#!/usr/bin/env bash
# Command 1 of the README: install what is missing, build, and run the main
# job (a real training run that takes a few minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
exec build/kiln train "$@"
