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
echo "ok"
