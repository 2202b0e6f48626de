#!/usr/bin/env bash
# Decoding on the GPU (called by scripts/run_on_device.sh with OUT and
# KILN_DIST set): completion tokens/s for 1 stream and 16 concurrent streams
# of 128 tokens, Kiln (kiln serve --device cuda, continuous batching) against
# transformers' generate() on the same GPU, in bf16, on a Llama of
# SmolLM-135M's shape with random weights that tests/hf/make_fixtures.py makes
# there (its tokenizer is trained on the fortunes in DATA_DIR/fortunes, which
# the run carries: the device has none of Debian's packages). Writes
# $OUT/results.md.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIST="${KILN_DIST:-$ROOT/dist/gpu}"
OUT="${OUT:-out/decode-gpu}"
mkdir -p "$OUT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kiln-decode-gpu-XXXXXX")"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
if [ ! -d /usr/share/games/fortunes ] && [ -n "${DATA_DIR:-}" ]; then
  mkdir -p /usr/share/games && ln -s "$DATA_DIR/fortunes" /usr/share/games/fortunes
fi
python3 "$ROOT/tests/hf/make_fixtures.py" --speed "$WORK/model" >&2 || exit 1
port=18127
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC')  $(nvidia-smi --query-gpu=name --format=csv,noheader), SmolLM-135M shape, bf16"
  echo "| engine, streams | completion tokens | seconds | tokens/s |"
  echo "|---|---:|---:|---:|"
} > "$OUT/results.md"
"$DIST/kiln" serve --model lm="hf:$WORK/model" --device cuda --precision bf16 --port "$port" --max-batch 32 \
  > "$OUT/serve.log" 2>&1 &
server=$!
python3 - "$port" <<'PY' || { echo "kiln serve did not come up" >&2; cat "$OUT/serve.log" >&2; exit 1; }
import sys, time, urllib.request
for _ in range(600):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1)
        sys.exit(0)
    except Exception:
        time.sleep(0.1)
sys.exit(1)
PY
python3 "$ROOT/bench/serve/generation_bench.py" "http://127.0.0.1:$port" lm "Kiln, " >> "$OUT/results.md"
kill -TERM "$server"; wait "$server" 2>/dev/null
python3 "$ROOT/bench/gpu/transformers_decode.py" "$WORK/model" "transformers, " bfloat16 >> "$OUT/results.md"
cat "$OUT/results.md"
