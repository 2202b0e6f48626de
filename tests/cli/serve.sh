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
# test image, streams a completion, and plots the runs' curves from --runs,
# with named axes.
CHROMIUM="$(command -v chromium || command -v chromium-browser)" || fail "chromium is not installed (scripts/install_deps.sh)"
port="$(free_port)"
"$KILN" serve --model mlp="$WORK/mlp" --model gpt="$WORK/gpt" --model cls="$WORK/cls" --runs "$WORK" --port "$port" \
  >"$WORK/page-server.log" 2>&1 &
server=$!
LOG="$WORK/page-server.log" wait_for_server "$port" "$server"
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
expect '<text [^>]*>step</text>'
expect '<text [^>]*>loss</text>'
expect '<text [^>]*>items/s</text>'

# Untrusted text stays text: a run directory and class labels holding markup
# (a model's labels come from its files) run no script, and a live run's
# half-written last line breaks nothing.
pwn='<img src=x onerror=document.title=666>'
runs="$WORK/page-runs"
mkdir -p "$runs/$pwn" "$runs/live"
cp "$WORK/mlp/metrics.jsonl" "$runs/$pwn/"
cp "$WORK/gpt/metrics.jsonl" "$runs/live/"
printf '{"kind":"train","step":99,"lo' >>"$runs/live/metrics.jsonl"
cp -r "$WORK/cls" "$WORK/cls-markup"
for state in "$WORK"/cls-markup/step_*/state.json; do
  python3 - "$state" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["state"]["classes"] = ["<img src=x onerror=document.title=667>" + c for c in j["state"]["classes"]]
json.dump(j, open(sys.argv[1], "w"))
PY
done
"$KILN" serve --model cls="$WORK/cls-markup" --model mlp="$WORK/mlp" --runs "$runs" --port "$port" \
  >"$WORK/page-server.log" 2>&1 &
server=$!
LOG="$WORK/page-server.log" wait_for_server "$port" "$server"
curl -sf "http://127.0.0.1:$port/v1/runs/live/metrics" >"$WORK/live.jsonl" || fail "GET /v1/runs/live/metrics failed"
python3 -c "import json, sys; [json.loads(l) for l in open(sys.argv[1])]" "$WORK/live.jsonl" \
  || fail "/v1/runs/NAME/metrics served a torn line"
[ "$(tail -c 1 "$WORK/live.jsonl" | od -An -c | tr -d ' ')" = '\n' ] || fail "the served metrics do not end with a line"
curl -sf "http://127.0.0.1:$port/v1/samples/fashion-mnist/0" >"$WORK/sample0.json"
run 0 "$CHROMIUM" --headless --no-sandbox --disable-gpu --virtual-time-budget=60000 --dump-dom \
  "http://127.0.0.1:$port/?classify=The%20compiler%20crashed%20again&model=cls"
expect '<title>Kiln</title>'  # an onerror handler would have set it to 666 or 667
expect '<h3>&lt;img src=x onerror=document.title=666&gt;</h3>'
expect '<span id="classify-label">&lt;img src=x onerror=document.title=667&gt;[a-z-]+</span>'
expect '<polyline id="loss-live" points="[0-9., ]+"'
# Only the boxes the served models answer: no language model, no completion box.
expect '<section id="complete-box" hidden="">'
expect '<section id="classify-box">'
expect '<section id="image-box">'
# The image box shows its first test image on load, read back from a screenshot.
run 0 "$CHROMIUM" --headless --no-sandbox --disable-gpu --virtual-time-budget=60000 --window-size=1000,1600 \
  --screenshot="$WORK/page.png" "http://127.0.0.1:$port/"
run 0 python3 "$(dirname "$0")/find_image.py" "$WORK/page.png" "$WORK/sample0.json"
kill -TERM "$server"
wait "$server" || fail "the page's server did not exit cleanly"
echo "ok"
