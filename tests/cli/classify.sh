#!/usr/bin/env bash
# fortunes-classify as a user runs it: a short training beats the
# majority-class baseline on the held-out fortunes, kiln eval reports the
# same accuracy from the checkpoint, and a resumed run is bitwise the
# uninterrupted one.
source "$(dirname "$0")/lib.sh"
run 0 "$KILN" train fortunes-classify --steps 80 --no-progress --out "$WORK/cls"
expect "fortunes-classify: 16 classes"
line="$(grep '^test accuracy' "$OUT")"
acc="$(echo "$line" | sed -E 's/^test accuracy: ([0-9.]+).*/\1/')"
base="$(echo "$line" | sed -E 's/.*largest class scores ([0-9.]+).*/\1/')"
python3 -c "import sys; a, b = $acc, $base; sys.exit(0 if a > b + 0.1 else 1)" \
  || fail "test accuracy $acc does not beat the majority baseline $base by 0.1"
run 0 "$KILN" eval "$WORK/cls"
expect "majority-class baseline: $base"
expect "test accuracy: $acc"
# Resume: 2 + 2 steps equal 4 straight, bit for bit.
run 0 "$KILN" train fortunes-classify --steps 4 --no-progress --out "$WORK/straight"
run 0 "$KILN" train fortunes-classify --steps 4 --stop-after 2 --no-progress --out "$WORK/resumed"
run 0 "$KILN" train fortunes-classify --steps 4 --no-progress --out "$WORK/resumed" --resume
expect "resumed from .* at step 2"
for f in model optimizer; do
  cmp -s "$WORK/straight/step_00000004/$f.safetensors" "$WORK/resumed/step_00000004/$f.safetensors" \
    || fail "the resumed run's $f differs from the uninterrupted run's"
done
echo "ok"
