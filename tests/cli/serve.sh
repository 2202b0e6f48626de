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

# The page at /, in headless Chromium: it classifies a text, classifies a
# test image, streams a completion, and plots the runs' curves from --runs.
CHROMIUM="$(command -v chromium || command -v chromium-browser)" || fail "chromium is not installed (scripts/install_deps.sh)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$KILN" serve --model mlp="$WORK/mlp" --model gpt="$WORK/gpt" --model cls="$WORK/cls" --runs "$WORK" --port "$port" \
  >"$WORK/page-server.log" 2>&1 &
server=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
run 0 "$CHROMIUM" --headless --no-sandbox --disable-gpu --virtual-time-budget=60000 --dump-dom \
  "http://127.0.0.1:$port/?classify=The%20compiler%20crashed%20again&model=cls&image=1&prompt=The%20"
kill -TERM "$server"
wait "$server" || fail "the page's server did not exit cleanly"
expect '<span id="classify-label">[a-z-]+</span>'
expect '<span id="image-label">[A-Za-z/ -]+</span></b> \(true: <span id="image-truth">Pullover</span>\)'
expect '<pre id="completion">The .+'
for run_name in mlp gpt cls; do
  expect "<polyline id=\"loss-$run_name\" points=\"[0-9., ]+\""
done
echo "ok"
