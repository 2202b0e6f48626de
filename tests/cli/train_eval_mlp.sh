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

# --target-accuracy: the test set after every epoch, stop once reached.
# Batches of 1000 make an epoch 55 steps.
run 0 "$KILN" train fashion-mlp --epochs 3 --batch-size 1000 --target-accuracy 0.5 --no-progress --out "$WORK/tta"
expect "step 55 \(epoch 1\.00\): test accuracy 0\.[5-9][0-9]* after [0-9.]+ s of training"
expect "reached the target test accuracy 0\.[5-9][0-9]* >= 0\.5000 at step 55"
expect "time to target: [0-9.]+ s of training"
[ -d "$WORK/tta/step_00000055" ] || fail "no checkpoint where the target was reached"
[ ! -d "$WORK/tta/step_00000110" ] || fail "the run went on past its target"
grep '"kind":"eval"' "$WORK/tta/metrics.jsonl" | grep -q '"train_s"' || fail "no train_s on the test evaluation"
run 0 "$KILN" train fashion-mlp --steps 55 --batch-size 1000 --target-accuracy 0.999 --no-progress --out "$WORK/tta-miss"
expect "did not reach the target test accuracy 0\.9990 in 55 steps"
# --eval-every: the test set every 20 steps, so the target is seen at step 20
# or 40 rather than at the end of the epoch.
run 0 "$KILN" train fashion-mlp --epochs 2 --batch-size 1000 --target-accuracy 0.5 --eval-every 20 --no-progress \
  --out "$WORK/tta-every"
expect "step 20 \(epoch 0\.36\): test accuracy"
expect "reached the target test accuracy 0\.[5-9][0-9]* >= 0\.5000 at step (20|40)"
[ ! -d "$WORK/tta-every/step_00000055" ] || fail "the run went on to the epoch's end past its target"
run 1 "$KILN" train fashion-mlp --steps 2 --eval-every 1 --no-progress --out "$WORK/every-alone"
expect "--eval-every says how often --target-accuracy tests"
run 1 "$KILN" train fortunes-gpt --steps 2 --target-accuracy 0.5 --no-progress --out "$WORK/tta-gpt"
expect "--target-accuracy applies to the image recipes"

# --precision bf16 on a CPU without bf16 instructions says so and trains in
# fp32 (KILN_CPU_BF16=0 makes this CPU look like one).
export KILN_CPU_BF16=0
run 0 "$KILN" train fashion-mlp --steps 3 --precision bf16 --no-progress --out "$WORK/no-bf16"
unset KILN_CPU_BF16
expect "no bf16 instructions .*training in fp32"
grep -Eq '"precision": *"fp32"' "$WORK/no-bf16/step_00000003/state.json" ||
  fail "the run without bf16 instructions did not train in fp32: $(cat "$WORK/no-bf16/step_00000003/state.json")"
echo "ok"
