#!/usr/bin/env bash
# The mission's real-time sentiment case: a classifier of DistilBERT-base's
# shape (66M parameters, random weights that tests/hf/make_fixtures.py
# --sentiment makes, cached outside the repository) served by kiln serve and
# driven by wrk on loopback with one review-length text per /v1/classify
# request, at concurrency 1 and 64, in fp32, bf16 and fp32 with
# --batch-invariant (what the mode costs): requests/s and p50/p99 latency,
# with the tokens per request.
#   DURATION=10s bench/serve/sentiment_bench.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KILN="${KILN:-$ROOT/build/kiln}"
DURATION="${DURATION:-10s}"
MODEL="${KILN_SENTIMENT_MODEL:-$HOME/.cache/kiln-hf/distilbert-shape}"
[ -f "$MODEL/model.safetensors" ] || "$("$ROOT/bench/torch2_venv.sh")" "$ROOT/tests/hf/make_fixtures.py" --sentiment "$MODEL" >&2
port=18124
export KILN_SENTIMENT_TEXT="The acting was wonderful and the story kept me guessing until the very last scene, though the middle dragged a little."
echo "# $(date -u '+%Y-%m-%d %H:%M UTC')  $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; wrk -d$DURATION"
echo "| precision | concurrency | requests/s | p50 ms | p99 ms | errors |"
echo "|---|---:|---:|---:|---:|---:|"
for setting in "fp32" "bf16" "fp32 --batch-invariant"; do
  set -- $setting
  precision="$1"
  shift
  "$KILN" serve --model sentiment="hf:$MODEL" --port "$port" --max-batch 64 --max-delay-us 2000 --max-queue 4096 \
    --precision "$precision" "$@" >/tmp/kiln-sentiment-serve.log 2>&1 &
  server=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.1; done
  for c in 1 64; do
    line="$(wrk -t"$(( c < 2 ? 1 : 2 ))" -c"$c" -d"$DURATION" --timeout 30s -s "$ROOT/bench/serve/sentiment.lua" \
      "http://127.0.0.1:$port/v1/classify" | grep RESULT)"
    eval "$(echo "$line" | sed 's/RESULT //')"
    echo "| $setting | $c | $rps | $p50_ms | $p99_ms | $errors |"
  done
  kill -TERM "$server"; wait "$server" || true
done
echo "(tokens per request: $("$KILN" tokenize "hf:$MODEL" --text "$KILN_SENTIMENT_TEXT" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["ids"]))'))"
