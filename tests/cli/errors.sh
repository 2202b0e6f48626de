#!/usr/bin/env bash
# Bad input gets a message and a non-zero status, never a crash.
source "$(dirname "$0")/lib.sh"
run 105 "$KILN" train no-such-recipe
expect "no-such-recipe not in \{fashion-mlp,fashion-cnn,fashion-fast,fortunes-gpt"
run 1 "$KILN" eval "$WORK/does-not-exist"
expect "kiln: error: .*does-not-exist.* does not exist"
mkdir -p "$WORK/empty"
run 1 "$KILN" eval "$WORK/empty"
expect "holds no complete checkpoint"
run 1 "$KILN" train fortunes-gpt --epochs 2 --out "$WORK/epochs" --no-progress
expect "kiln: error: --epochs does not apply to fortunes-gpt"
echo "ok"
