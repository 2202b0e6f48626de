#!/usr/bin/env bash
# Fine-tuning learns: a fortunes-gpt run fine-tuned on prompt/completion
# fortunes (kiln data fortunes-sft) lowers the validation loss on held-out
# completions, and LoRA at rank 8, training under 5% of the weights, comes
# within 5% of full fine-tuning's validation loss. (docs/FINE_TUNING.md has
# the full-length runs.)
source "$(dirname "$0")/lib.sh"

run 0 "$KILN" data fortunes-sft --out "$WORK/data"
run 0 "$KILN" train fortunes-gpt --steps 200 --no-progress --out "$WORK/gpt"
val() { sed -nE 's/^validation: +([0-9.]+) nats\/token$/\1/p' "$OUT"; }
common=(--init "$WORK/gpt" --data "$WORK/data/train.jsonl" --val "$WORK/data/val.jsonl" --steps 150 --batch-size 16
        --no-progress)
run 0 "$KILN" train sft "${common[@]}" --lr 1e-3 --out "$WORK/full"
expect "exporting the run $WORK/gpt as a Hugging Face folder"
before="$(sed -nE 's/^validation loss before training: ([0-9.]+).*/\1/p' "$OUT")"
full="$(val)"
run 0 "$KILN" train sft "${common[@]}" --lr 3e-3 --lora-rank 8 --lora-targets c_attn,c_fc --out "$WORK/lora"
share="$(sed -nE 's/.*training [0-9]+ \(([0-9.]+)%\).*/\1/p' "$OUT")"
lora="$(val)"
echo "validation nats/token: before $before, full fine-tuning $full, LoRA $lora training $share% of the weights"
python3 - "$before" "$full" "$lora" "$share" <<'PY' || fail "before $before, full $full, LoRA $lora ($share% trained)"
import sys
before, full, lora, share = map(float, sys.argv[1:])
assert full < before and lora < before, "fine-tuning did not lower the validation loss"
assert lora <= 1.05 * full, "LoRA is not within 5% of full fine-tuning"
assert share < 5, "LoRA trains 5% of the weights or more"
PY
echo "PASS"
