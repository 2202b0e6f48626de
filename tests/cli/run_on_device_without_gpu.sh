#!/usr/bin/env bash
# scripts/run_on_device.sh on this GPU-less machine: without a bundle it says
# what to do (exit 2); with one it says why the GPU tests skip, runs every
# step, and exits 3, never claiming a pass.
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
run 2 env OUT="$WORK/out1" KILN_DIST="$WORK/no-bundle" bash "$ROOT/scripts/run_on_device.sh"
expect "kiln_gpu_tests not found; run scripts/bundle_gpu.sh first"
# A bundle made of this build's binaries (as scripts/bundle_gpu.sh copies them).
mkdir -p "$WORK/bundle"
ln -s "$KILN" "$WORK/bundle/kiln"
ln -s "$(dirname "$KILN")/kiln_gpu_tests" "$WORK/bundle/kiln_gpu_tests"
run 3 env OUT="$WORK/out2" KILN_DIST="$WORK/bundle" SKIP_BENCH=1 bash "$ROOT/scripts/run_on_device.sh"
expect "no GPU here"
expect "every GPU test was skipped: the CUDA backend saw no device"
grep -q "| kiln_gpu_tests | 0 | [0-9]* passed, 0 failed, [0-9]* skipped" "$WORK/out2/summary.md" || { cat "$WORK/out2/summary.md"; fail "summary.md lacks the GPU test row"; }
grep -q "| kiln info | 0 |" "$WORK/out2/summary.md" || fail "summary.md lacks the kiln info row"
# Carried packed, as scripts/bundle_gpu.sh packs it: unpacked, then the same run.
tar -C "$WORK" -cJf "$WORK/packed.tar.xz" bundle
mkdir -p "$WORK/device" && mv "$WORK/packed.tar.xz" "$WORK/device/bundle.tar.xz"
run 3 env OUT="$WORK/out3" KILN_DIST="$WORK/device/bundle" SKIP_BENCH=1 bash "$ROOT/scripts/run_on_device.sh"
expect "unpack $WORK/device/bundle.tar.xz"
[ -x "$WORK/device/bundle/kiln_gpu_tests" ] || fail "the packed bundle was not unpacked beside it"
grep -q "| kiln_gpu_tests | 0 | [0-9]* passed, 0 failed, [0-9]* skipped" "$WORK/out3/summary.md" || fail "the unpacked bundle's GPU tests did not run"
echo "ok"
