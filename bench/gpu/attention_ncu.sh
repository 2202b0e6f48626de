#!/usr/bin/env bash
# Runs on the GPU machine (run_on_device.sh, BENCHES=attention_ncu): Nsight
# Compute's view of the tensor-core attention kernels (forward, dQ, dK/dV) at
# GPT-2's shape and at head dim 128: achieved tensor, memory and shared-memory
# throughput, occupancy and registers, to see which limit each kernel meets.
# Clocks are left as they are (--clock-control none). Writes $OUT/ncu_*.txt.
set -uo pipefail
DIST="${KILN_DIST:-dist/gpu}"
OUT="${OUT:-out/attention-ncu}"
mkdir -p "$OUT"
NCU="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n1)"
[ -n "$NCU" ] || { echo "attention_ncu.sh: ncu not found" >&2; exit 1; }
for D in 64 128; do
  # The first three matching launches are one forward and one backward (dQ, then dK/dV).
  "$NCU" --clock-control none --kernel-name 'regex:forward_kernel|dq_kernel|dkdv_kernel' --launch-count 3 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis \
    "$DIST/bench_gpu" attention --T 1024 --D "$D" --dtype bf16 --iters 1 > "$OUT/ncu_T1024_D$D.txt" 2>&1
  echo "ncu T=1024 D=$D: exit $?"
  grep -E "^  [a-z_:<>0-9, ]*kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Shared Memory Configuration Size|L1/TEX Hit|Executed Ipc A" "$OUT/ncu_T1024_D$D.txt" | head -60
done
