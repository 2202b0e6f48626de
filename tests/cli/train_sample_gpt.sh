#!/usr/bin/env bash
# Train a few GPT steps, evaluate and sample from that run.
source "$(dirname "$0")/lib.sh"
run 0 "$KILN" train fortunes-gpt --steps 4 --batch-size 4 --no-progress --out "$WORK/gpt"
expect "bits per byte"
expect "sample 1:"
bpb=$(grep -Eo "[0-9.]+ bits per byte" "$OUT" | head -1)
run 0 "$KILN" eval "$WORK/gpt"
expect "$bpb"
run 0 "$KILN" sample "$WORK/gpt" --count 2 --max-tokens 8 --prompt "The "
[ "$(grep -c -- "^---$" "$OUT")" -eq 2 ] || fail "expected 2 samples"
expect "^The "
# --temperature 0 is greedy: the same text whatever the seed.
run 0 "$KILN" sample "$WORK/gpt" --max-tokens 12 --prompt "The " --temperature 0 --seed 1
cp "$OUT" "$WORK/greedy1"
run 0 "$KILN" sample "$WORK/gpt" --max-tokens 12 --prompt "The " --temperature 0 --seed 2
cmp -s "$OUT" "$WORK/greedy1" || fail "--temperature 0 gave different texts for different seeds"
run 1 "$KILN" sample "$WORK/gpt" --temperature -1
expect "temperature must be >= 0"
echo "ok"
