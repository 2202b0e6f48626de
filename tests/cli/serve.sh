#!/usr/bin/env bash
# kiln serve end to end: trains two small models, then tests/cli/serve_check.py
# drives real servers over loopback (every endpoint and error code, a burst of
# 200 concurrent requests, streaming, overload, SIGTERM with requests in flight).
source "$(dirname "$0")/lib.sh"
run 0 "$KILN" train fashion-mlp --steps 200 --no-progress --out "$WORK/mlp"
run 0 "$KILN" train fortunes-gpt --steps 20 --n-layer 2 --n-embd 64 --n-head 4 --block-size 64 --no-progress \
  --out "$WORK/gpt"
run 0 "$KILN" train fortunes-classify --steps 10 --no-progress --out "$WORK/cls"
run 0 python3 "$(dirname "$0")/serve_check.py" "$KILN" "$WORK/mlp" "$WORK/gpt" "$WORK/cls"
cat "$OUT"
echo "ok"
