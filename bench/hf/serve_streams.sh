#!/usr/bin/env bash
# Completion tokens/s through kiln serve for 1 and 16 concurrent streams
# (bench/serve/generation_bench.py: 4 completions of 128 tokens per stream)
# on the SmolLM-135M-shaped model of bench/hf/run.sh, in f32, bf16 (serve
# --precision bf16) and quantized (--quantize int8, int4): what continuous
# batching and quantized weights give a server's aggregate; and f32 and int8
# with --batch-invariant, what that mode costs.
#   KILN_HF_BENCH_MODEL=DIR bench/hf/serve_streams.sh ["LABEL SERVE-OPTIONS..." ...]
# (arguments: the settings to run instead of all six, e.g. "int8 --quantize int8")
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KILN="${KILN:-$ROOT/build/kiln}"
MODEL="${KILN_HF_BENCH_MODEL:-$HOME/.cache/kiln-hf/smollm-135m-shape}"
# (KILN_HF_BENCH_SHAPE=tinyllama-1.1b with its own KILN_HF_BENCH_MODEL folder for TinyLlama's shape.)
[ -f "$MODEL/config.json" ] || "$("$ROOT/bench/torch2_venv.sh")" "$ROOT/tests/hf/make_fixtures.py" --speed "$MODEL" \
  --shape "${KILN_HF_BENCH_SHAPE:-smollm-135m}" >&2
port=18125
echo "# $(date -u '+%Y-%m-%d %H:%M UTC')  $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "| weights, streams | completion tokens | seconds | tokens/s |"
echo "|---|---:|---:|---:|"
settings=("f32" "bf16 --precision bf16" "int8 --quantize int8" "int4 --quantize int4"
  "f32-batch-invariant --batch-invariant" "int8-batch-invariant --quantize int8 --batch-invariant")
[ $# -gt 0 ] && settings=("$@")
for weights in "${settings[@]}"; do
  set -- $weights
  label="$1"
  shift
  "$KILN" serve --model lm="hf:$MODEL" --port "$port" --max-batch 32 "$@" >/tmp/kiln-streams-serve.log 2>&1 &
  server=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.1; done
  python3 "$ROOT/bench/serve/generation_bench.py" "http://127.0.0.1:$port" lm "$label, "
  kill -TERM "$server"; wait "$server" || true
done
