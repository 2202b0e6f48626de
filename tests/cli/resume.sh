#!/usr/bin/env bash
# The README's resume example: a resumed run keeps its settings, extends with
# --steps, and refuses a different --batch-size naming the saved value.
source "$(dirname "$0")/lib.sh"
run 0 "$KILN" train fashion-mlp --steps 4 --seed 7 --batch-size 64 --lr 2e-3 --stop-after 2 --no-progress --out "$WORK/mine"
run 0 "$KILN" train --out "$WORK/mine" --resume --no-progress
expect "resumed from $WORK/mine/step_00000002 at step 2 of 4"
expect "4 steps of 64 images"
run 0 "$KILN" train --out "$WORK/mine" --resume --steps 6 --no-progress
expect "--steps 6: the run now ends at step 6 \(was 4"
expect "resumed from $WORK/mine/step_00000004"
run 1 "$KILN" train --out "$WORK/mine" --resume --batch-size 128 --no-progress
expect "kiln: error: --batch-size 128 differs from the run's saved --batch-size 64"
echo "ok"
