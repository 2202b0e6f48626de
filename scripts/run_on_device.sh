#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, against the bundle made
# by scripts/bundle_gpu.sh (dist/gpu/, unpacked first from dist/gpu.tar.xz
# where only the archive was carried). Writes everything into "$OUT":
#
#   nvidia-smi.txt        the device as the driver sees it
#   kiln_info.txt         `kiln info` (GPU properties, measured bandwidth)
#   kiln_gpu_tests.log    the CUDA-vs-CPU op tests (+ .xml, gtest's report)
#   kiln_tests.log        the CPU suite, only with RUN_CPU_TESTS=1
#   sanitize_*.log        compute-sanitizer memcheck over the GPU tests and
#                         racecheck over the attention and reduction ones
#                         (Kiln's kernels: cuDNN's attention is switched off),
#                         only with SANITIZE=1 (MEMCHECK_FILTER and
#                         RACECHECK_FILTER narrow them). memcheck leaves out the test
#                         that runs out of memory on purpose (each failed
#                         cudaMalloc is a reported error) and NCCL's, whose
#                         library probes kernels it has no image for.
#   train_*.log           with TRAIN=1 and DATA_DIR holding fashion-mnist/ and
#                         fortunes/ (either may be missing): fashion-cnn and
#                         fortunes-gpt (bf16) on cuda, and a stopped-and-resumed
#                         fortunes-gpt run compared byte for byte with an
#                         uninterrupted one
#   bench/<name>.log      each benchmark script bench/gpu/*.sh (the .py files
#                         are their helpers), run with OUT=$OUT/bench/<name>
#                         and KILN_DIST=dist/gpu; SKIP_BENCH=1 skips them,
#                         BENCHES="a b" runs only those, BENCH_TIMEOUT
#                         limits each
#   summary.md            one table: step, exit code, test counts, seconds
#
# Exit code: 2 without a bundle, 3 when no GPU was seen (every GPU test
# skipped), the GPU tests' status otherwise; benchmark failures are recorded
# in summary.md but do not fail the run.
# Usage: OUT=/some/dir scripts/run_on_device.sh
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/out/device}"
DIST="${KILN_DIST:-$ROOT/dist/gpu}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.md"
printf '| step | exit | result | seconds |\n|---|---|---|---|\n' > "$SUMMARY"

# Runs a step with its output in a log, stopped after STEP_TIMEOUT seconds
# (default 300) so that one hung kernel cannot eat the whole lease; appends a
# summary row. step NAME LOG COMMAND...
step() {
  local name="$1" log="$2"
  shift 2
  echo "== $name"
  local start=$SECONDS
  timeout -k 5 "${STEP_TIMEOUT:-300}" "$@" > "$log" 2>&1
  local rc=$?
  local result
  result=$(gtest_counts "$log")
  printf '| %s | %s | %s | %s |\n' "$name" "$rc" "${result:--}" "$((SECONDS - start))" >> "$SUMMARY"
  tail -n 5 "$log"
  return $rc
}

# "12 passed, 1 failed, 3 skipped" from a gtest log, or nothing.
gtest_counts() {
  local log="$1"
  grep -q '^\[==========\]' "$log" 2>/dev/null || return 0
  local passed failed skipped
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -n1)
  echo "${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped"
}

# Say at once whether a GPU is visible, and why not: the GPU tests will then
# report as skipped and this script exits 3.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "run_on_device.sh: no GPU here: nvidia-smi is not installed (no NVIDIA driver); GPU tests will skip" >&2
elif ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run_on_device.sh: no GPU here: nvidia-smi sees no device; GPU tests will skip" >&2
fi

# The bundle travels packed. Python's tarfile unpacks it: the device may lack xz.
if [ ! -x "$DIST/kiln_gpu_tests" ] && [ -f "$DIST.tar.xz" ]; then
  echo "== unpack $DIST.tar.xz"
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$DIST.tar.xz" "$(dirname "$DIST")"
fi
if [ ! -x "$DIST/kiln_gpu_tests" ]; then
  echo "run_on_device.sh: $DIST/kiln_gpu_tests not found; run scripts/bundle_gpu.sh first (and carry dist/gpu.tar.xz)" >&2
  echo "| bundle | missing | $DIST not found | 0 |" >> "$SUMMARY"
  exit 2
fi

# The bundle leaves CUDA's own libraries to the machine. Where the toolkit's
# folders lack one, PyTorch's CUDA wheels (nvidia-*) carry the same libraries.
if ldd "$DIST/kiln" | grep -q 'not found'; then
  extra=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so*' -o -name 'libcudart.so*' 2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
  export LD_LIBRARY_PATH="${extra}${LD_LIBRARY_PATH:-}"
  echo "run_on_device.sh: CUDA libraries from $extra" >&2
  ldd "$DIST/kiln" | grep 'not found' >&2
fi

step "nvidia-smi" "$OUT/nvidia-smi.txt" nvidia-smi
step "kiln info" "$OUT/kiln_info.txt" "$DIST/kiln" info
step "kiln_gpu_tests" "$OUT/kiln_gpu_tests.log" "$DIST/kiln_gpu_tests" --gtest_output="xml:$OUT/kiln_gpu_tests.xml"
gpu_rc=$?
# A run where every test skipped (no device seen) is not a pass.
if grep -q '^\[  SKIPPED \]' "$OUT/kiln_gpu_tests.log" && ! grep -q '^\[  PASSED  \] [1-9]' "$OUT/kiln_gpu_tests.log"; then
  echo "run_on_device.sh: every GPU test was skipped: the CUDA backend saw no device" >&2
  gpu_rc=3
fi
if [ "${RUN_CPU_TESTS:-0}" = 1 ]; then
  step "kiln_tests (cpu)" "$OUT/kiln_tests.log" "$DIST/kiln_tests"
fi

if [ "${TRAIN:-0}" = 1 ]; then
  runs=$(mktemp -d)
  # Each run needs its dataset under DATA_DIR; a call that carries only one
  # (the carry limit is 64 MiB) runs only that one.
  if [ -d "$DATA_DIR/fashion-mnist" ]; then
    step "train fashion-cnn" "$OUT/train_fashion_cnn.log" "$DIST/kiln" train fashion-cnn --device cuda \
      --data-dir "$DATA_DIR/fashion-mnist" --out "$runs/cnn" --no-progress
  fi
  if [ -d "$DATA_DIR/fortunes" ]; then
    step "train fortunes-gpt bf16" "$OUT/train_fortunes_gpt.log" "$DIST/kiln" train fortunes-gpt --device cuda \
      --precision bf16 --data-dir "$DATA_DIR/fortunes" --out "$runs/gpt" --no-progress
  fi
  resume_check() {
    local args=(train fortunes-gpt --device cuda --precision bf16 --data-dir "$DATA_DIR/fortunes" --steps 40 --no-progress)
    "$DIST/kiln" "${args[@]}" --out "$runs/whole" &&
      "$DIST/kiln" "${args[@]}" --out "$runs/parts" --stop-after 20 &&
      "$DIST/kiln" train --out "$runs/parts" --resume --device cuda --no-progress --data-dir "$DATA_DIR/fortunes" &&
      cmp "$runs/whole/step_00000040/model.safetensors" "$runs/parts/step_00000040/model.safetensors" &&
      cmp "$runs/whole/step_00000040/optimizer.safetensors" "$runs/parts/step_00000040/optimizer.safetensors" &&
      echo "resume on cuda: bitwise equal at step 40"
  }
  export runs DIST DATA_DIR
  export -f resume_check  # timeout runs programs, not functions
  if [ -d "$DATA_DIR/fortunes" ]; then
    step "resume is bitwise exact" "$OUT/train_resume.log" bash -c resume_check
  fi
fi

if [ "${SANITIZE:-0}" = 1 ]; then
  STEP_TIMEOUT=${SANITIZE_TIMEOUT:-150} step "memcheck" "$OUT/sanitize_memcheck.log" \
    compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 "$DIST/kiln_gpu_tests" \
    --gtest_filter="${MEMCHECK_FILTER:--CudaBackendAllocator.OutOfMemory*:Nccl*}"
  # racecheck checks Kiln's own kernels (KILN_CUDNN=0): on cuDNN's Hopper
  # attention kernel it reports hazards inside NVIDIA's code (docs/CUDA.md).
  STEP_TIMEOUT=${SANITIZE_TIMEOUT:-240} step "racecheck" "$OUT/sanitize_racecheck.log" \
    env KILN_CUDNN=0 compute-sanitizer --tool racecheck --error-exitcode 9 "$DIST/kiln_gpu_tests" \
    --gtest_filter="${RACECHECK_FILTER:-*Attention*:*Reduce*:*Softmax*:*LayerNorm*:*CrossEntropy*}"
fi

# Benchmark entry points are the bench/gpu/*.sh scripts; the .py files there
# are their helpers (torch_gpu_bench.py needs a subcommand the scripts give).
# SKIP_BENCH=1 leaves them out (the CPU test of this script's handling).
if [ -d bench/gpu ] && [ "${SKIP_BENCH:-0}" != 1 ]; then
  mkdir -p "$OUT/bench"
  for script in bench/gpu/*.sh; do
    [ -e "$script" ] || continue
    name="$(basename "$script" .sh)"
    case " ${BENCHES:-$name} " in *" $name "*) ;; *) continue ;; esac  # BENCHES="a b" runs only those
    mkdir -p "$OUT/bench/$name"
    STEP_TIMEOUT=${BENCH_TIMEOUT:-${STEP_TIMEOUT:-300}} \
      step "bench $name" "$OUT/bench/$name.log" env OUT="$OUT/bench/$name" KILN_DIST="$DIST" bash "$script"
  done
fi

echo "== summary ($SUMMARY)"
cat "$SUMMARY"
exit $gpu_rc
