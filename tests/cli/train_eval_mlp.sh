#!/usr/bin/env bash
# Train a short MLP run, then evaluate that run's checkpoint (not another's).
source "$(dirname "$0")/lib.sh"
run 0 "$KILN" train fashion-mlp --steps 30 --batch-size 64 --no-progress --out "$WORK/mlp"
expect "test accuracy: 0\.[5-9]"
expect "checkpoint: +$WORK/mlp/step_00000030"
accuracy=$(grep -Eo "test accuracy: [0-9.]+" "$OUT" | grep -Eo "[0-9.]+$")
run 0 "$KILN" eval "$WORK/mlp"
expect "evaluating $WORK/mlp/step_00000030"
expect "test accuracy: $accuracy"
[ -s "$WORK/mlp/metrics.jsonl" ] || fail "no run record $WORK/mlp/metrics.jsonl"

# --precision bf16 on a CPU without bf16 instructions says so and trains in
# fp32 (KILN_CPU_BF16=0 makes this CPU look like one).
export KILN_CPU_BF16=0
run 0 "$KILN" train fashion-mlp --steps 3 --precision bf16 --no-progress --out "$WORK/no-bf16"
unset KILN_CPU_BF16
expect "no bf16 instructions .*training in fp32"
grep -Eq '"precision": *"fp32"' "$WORK/no-bf16/step_00000003/state.json" ||
  fail "the run without bf16 instructions did not train in fp32: $(cat "$WORK/no-bf16/step_00000003/state.json")"
echo "ok"
