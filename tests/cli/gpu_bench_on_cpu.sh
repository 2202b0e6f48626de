#!/usr/bin/env bash
# bench_gpu's code paths on the CPU (--device cpu), as the device run uses
# them on a GPU: a GPT step with --profile (the per-op table on stderr) and
# the CPU-versus-device comparison, one JSON line per row, named as
# bench/gpu/torch_gpu_bench.py names PyTorch's rows.
source "$(dirname "$0")/lib.sh"
[ -x "${BENCH_GPU:-}" ] || fail "BENCH_GPU is not set to the bench_gpu binary"
run 0 "$BENCH_GPU" gpt --device cpu --batch 1 --layers 1 --width 32 --heads 2 --block 16 --iters 2 --profile
expect '"bench":"gpt","impl":"kiln","device":"cpu"'
expect "cpu:matmul"
expect "framework overhead"
run 0 "$BENCH_GPU" compare --device cpu --n 64
for work in "matmul f32 (tf32 on GPU)" "matmul bf16" "GPT training step (fortunes-gpt model, batch 16, fp32)" \
  "CNN training step (batch 128)" "CNN batched inference (batch 1024)"; do
  grep -qF "\"impl\":\"kiln\",\"work\":\"$work\"" "$OUT" || fail "no compare row for $work"
  grep -qF "\"$work\"" "$(dirname "$0")/../../bench/gpu/torch_gpu_bench.py" || fail "torch_gpu_bench.py has no row named $work"
done
echo "ok"
