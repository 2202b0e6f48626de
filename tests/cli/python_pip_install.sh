#!/usr/bin/env bash
# `pip install .` in a fresh venv (scikit-build-core and pybind11 from PyPI,
# numpy and PyTorch seen from Debian's site-packages) builds a module that
# imports from outside the source tree, passes the Python suite, and trains
# the MLP to the CLI's losses and test accuracy (tests/python/test_training.py).
# CC/CXX as the main build names them, so ccache serves the library's objects.
source "$(dirname "$0")/lib.sh"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"

run 0 /usr/bin/python3 -m venv --system-site-packages "$WORK/venv"
# pip's build isolation fetches scikit-build-core and pybind11; without PyPI the test is skipped, not passed.
if ! timeout 120 "$WORK/venv/bin/pip" download --quiet --no-deps --dest "$WORK/probe" scikit-build-core >/dev/null 2>&1; then
  echo "SKIPPED: PyPI is not reachable from here (pip install . needs scikit-build-core and pybind11 from it)"
  exit 0
fi
cd "$WORK"
run 0 env CC=cc CXX=c++ "$WORK/venv/bin/pip" install --quiet --config-settings=build-dir="$WORK/wheel-build" "$SRC"
run 0 "$WORK/venv/bin/python" -c "import kiln; print(kiln.__file__, kiln.__version__)"
expect "^$WORK/venv/lib/python3[.0-9]*/site-packages/kiln/__init__.py [0-9]+\.[0-9]+\.[0-9]+$"
run 0 env KILN_SOURCE_DIR="$SRC" "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider "$SRC/tests/python"
expect "passed"
! grep -q "skipped" "$OUT" || fail "the installed module skipped tests"
echo "pip install . passed the Python suite"
