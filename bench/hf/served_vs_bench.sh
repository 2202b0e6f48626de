#!/usr/bin/env bash
# One stream through kiln serve against kiln_hf_bench on the same model: kiln_hf_bench's decoding tokens/s
# (16-token prompt, 128 new, best of 3), then kiln serve's best of 3 completions of 128 tokens at temperature 1
# (POST /v1/completions, ignore_eos; the request's whole time, prompt and HTTP included), in ROUNDS
# interleaved rounds, a ratio each (the bar: 0.95).
#   BUILD_DIR=build [T=2] [ROUNDS=2] bench/hf/served_vs_bench.sh MODEL
# MODEL is what --model takes after "lm=" (gguf:FILE or hf:DIR); kiln_hf_bench reads the same, quantized
# GGUF files as they are.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build}"
MODEL="${1:?name the model: gguf:FILE or hf:DIR}"
T="${T:-2}"
PORT=18131
kind="${MODEL%%:*}" path="${MODEL#*:}"
bench_args=("$path" 16 128 3)
[ "$kind" = gguf ] && bench_args+=(gguf)
for round in $(seq "${ROUNDS:-2}"); do
  bench="$(OMP_NUM_THREADS=$T "$BUILD/kiln_hf_bench" "${bench_args[@]}" 2>/dev/null | tail -1 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["decode_tokens_per_s"])')"
  OMP_NUM_THREADS=$T "$BUILD/kiln" serve --model lm="$MODEL" --port $PORT >/tmp/kiln-served-vs-bench.log 2>&1 &
  server=$!
  until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
    kill -0 "$server" 2>/dev/null || { cat /tmp/kiln-served-vs-bench.log >&2; exit 1; }
    sleep 0.2
  done
  served="$(python3 - "$PORT" <<'PY'
import json, sys, time, urllib.request
best = 0.0
for seed in (1, 2, 3):
    body = json.dumps({"model": "lm", "prompt": "The ", "max_tokens": 128, "temperature": 1.0, "seed": seed,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    start = time.time()
    tokens = json.load(urllib.request.urlopen(request, timeout=600))["usage"]["completion_tokens"]
    best = max(best, tokens / (time.time() - start))
print(best)
PY
)"
  kill -TERM "$server"
  wait "$server" || true
  python3 -c "print('round $round, $T threads: bench %.2f, served %.2f tokens/s: %.2f' % ($bench, $served, $served / $bench))"
done
