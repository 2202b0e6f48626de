#!/usr/bin/env bash
# kiln train classify as a user runs it: the BERT fixture fine-tuned on
# fortunes (which file each is from, 16 labels: kiln data fortunes-classify)
# beats the majority-label baseline on held-out fortunes; a causal LM gets a
# new head on its last token; kiln eval prints accuracy and the confusion
# matrix; bad input is refused clearly.
source "$(dirname "$0")/lib.sh"
FIX="$(cd "$(dirname "$0")/../hf/fixtures" && pwd)"

run 0 "$KILN" data fortunes-classify --out "$WORK/data"
expect "fortunes-classify: [0-9]+ in train.jsonl, [0-9]+ in val.jsonl"
run 0 "$KILN" train classify --init "hf:$FIX/bert" --data "$WORK/data/train.jsonl" --val "$WORK/data/val.jsonl" \
  --steps 800 --batch-size 16 --lr 3e-3 --no-progress --out "$WORK/bert"
expect "bert with a new head\), 16 labels"
expect "confusion matrix"
accuracy="$(sed -nE 's/^test accuracy: ([0-9.]+).*/\1/p' "$OUT")"
baseline="$(sed -nE 's/^majority-label baseline: ([0-9.]+)/\1/p' "$OUT")"
echo "held-out accuracy $accuracy, majority-label baseline $baseline"
python3 -c "import sys; sys.exit(0 if $accuracy > 1.5 * $baseline else 1)" \
  || fail "accuracy $accuracy does not beat the majority baseline $baseline"
run 0 "$KILN" eval "$WORK/bert"
expect "test accuracy: $accuracy"
expect "^ +15 zippy"

# A causal LM as a classifier: a new head on the last token.
awk 'NR % 170 == 1' "$WORK/data/train.jsonl" > "$WORK/small.jsonl"  # every file's fortunes are together
run 0 "$KILN" train classify --init "hf:$FIX/llama-gqa" --data "$WORK/small.jsonl" --steps 4 --batch-size 8 \
  --no-progress --out "$WORK/llama"
expect "llama with a new head on its last token"
run 0 "$KILN" eval "$WORK/llama"
expect "its training examples"

# Bad input.
printf '{"text": "a", "label": "x"}\n{"text": "b", "label": 1.5}\n' > "$WORK/bad.jsonl"
run 1 "$KILN" train classify --init "hf:$FIX/bert" --data "$WORK/bad.jsonl" --out "$WORK/x"
expect "bad.jsonl:2: \"label\" must be a string or an integer"
printf '{"text": "a", "label": "x"}\n{"text": "b", "label": "x"}\n' > "$WORK/one.jsonl"
run 1 "$KILN" train classify --init "hf:$FIX/bert" --data "$WORK/one.jsonl" --out "$WORK/x"
expect "has 1 label; a classifier needs two or more"
printf '{"text": "a", "label": "nope"}\n' > "$WORK/val-bad.jsonl"
run 1 "$KILN" train classify --init "hf:$FIX/bert" --data "$WORK/small.jsonl" --val "$WORK/val-bad.jsonl" --out "$WORK/x"
expect "label 'nope' is not one the training data has"
run 1 "$KILN" train classify --data "$WORK/small.jsonl" --out "$WORK/x"
expect "needs --init hf:DIR"
echo "PASS"
