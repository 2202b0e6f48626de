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

# The run classifies (kiln classify, as kiln serve loads it) and exports as
# a folder that Kiln and transformers load with the same probabilities.
TEXT="The compiler crashed again, and the manual was no help."
run 0 "$KILN" classify "$WORK/bert" --text "$TEXT" --json
cp "$OUT" "$WORK/bert.json"
run 0 "$KILN" export "$WORK/bert" --format hf --out "$WORK/bert-hf"
run 0 "$KILN" classify "hf:$WORK/bert-hf" --text "$TEXT" --json
python3 - "$WORK/bert.json" "$OUT" <<'PY' || fail "the export classifies differently from the run"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["label"] == b["label"] and max(abs(a["probs"][k] - b["probs"][k]) for k in a["probs"]) < 1e-5, (a, b)
PY

# A causal LM as a classifier: a new head on the last token.
awk 'NR % 170 == 1' "$WORK/data/train.jsonl" > "$WORK/small.jsonl"  # every file's fortunes are together
run 0 "$KILN" train classify --init "hf:$FIX/llama-gqa" --data "$WORK/small.jsonl" --steps 4 --batch-size 8 \
  --no-progress --out "$WORK/llama"
expect "llama with a new head on its last token"
run 0 "$KILN" eval "$WORK/llama"
expect "its training examples"
run 0 "$KILN" classify "$WORK/llama" --text "$TEXT" --json
cp "$OUT" "$WORK/llama.json"
run 0 "$KILN" export "$WORK/llama" --format hf --out "$WORK/llama-hf"
# Kiln loads the export too (LlamaForSequenceClassification), with the run's probabilities.
run 0 "$KILN" classify "hf:$WORK/llama-hf" --text "$TEXT" --json
python3 - "$WORK/llama.json" "$OUT" <<'PY' || fail "Kiln classifies its causal-LM export differently from the run"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["label"] == b["label"] and max(abs(a["probs"][k] - b["probs"][k]) for k in a["probs"]) < 1e-5, (a, b)
PY
run 1 "$KILN" train classify --init "hf:$WORK/llama-hf" --data "$WORK/small.jsonl" --steps 1 --out "$WORK/x"
expect "causal language model with a classification head; fine-tune the language model"
require_oracle transformers
run 0 "$ORACLE_PY" - "$WORK" "$TEXT" bert llama <<'PY'
import json, sys, torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
work, text = sys.argv[1], sys.argv[2]
for name in sys.argv[3:]:
    folder, kiln = f"{work}/{name}-hf", json.load(open(f"{work}/{name}.json"))
    model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        probs = torch.softmax(model(**AutoTokenizer.from_pretrained(folder)(text, return_tensors="pt")).logits[0], -1)
    theirs = {model.config.id2label[i]: p for i, p in enumerate(probs.tolist())}
    worst = max(abs(theirs[k] - v) for k, v in kiln["probs"].items())
    assert worst < 1e-4, (folder, worst, theirs, kiln)
    print(f"transformers loads {folder} with Kiln's probabilities: largest difference {worst:.1e}")
PY
expect_lines 2 "largest difference"

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
