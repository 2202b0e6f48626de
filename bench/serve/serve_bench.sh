#!/usr/bin/env bash
# kiln serve under load from wrk on loopback: requests/s and p50/p99 latency
# for one-image KServe v2 requests to the Fashion-MNIST CNN (as JSON numbers,
# and as binary tensor data: "cnn-binary") and one-text /v1/classify requests
# to the fortunes text classifier, at concurrency 1, 8, 64 and 256, with
# dynamic batching (--max-batch 64, --max-delay-us 2000) and with batch size
# 1; after each, the model's raw batched throughput in process (batches of 64
# through the same InferenceModel); then completion tokens/s of the fortunes
# GPT for 1 and 16 concurrent streams, with continuous batching and one
# completion at a time.
#
#   bench/serve/serve_bench.sh          # DURATION=10s; MODELS="cnn cnn-binary text"; GENERATION=1; PRECISION=fp32
#   PRECISION=bf16 MODELS=text GENERATION=0 bench/serve/serve_bench.sh   # kiln serve --precision bf16
#   MODEL_THREADS=1 ... bench/serve/serve_bench.sh   # kiln serve --threads 1, and the raw run on 1 thread:
#                                                    # the other core left to HTTP and to wrk
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KILN="${KILN:-$ROOT/build/kiln}"
DURATION="${DURATION:-10s}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kiln-serve-XXXXXX")"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
"$KILN" train fashion-cnn --steps 100 --no-progress --out "$WORK/cnn" >/dev/null
"$KILN" train fortunes-classify --steps 60 --no-progress --out "$WORK/text" >/dev/null
port=18123
# The body of a binary tensor data request (bench/serve/infer_binary.lua): a JSON header, then the pixels' bytes.
export KILN_BINARY_BODY="$WORK/binary-body" KILN_BINARY_HEADER_LENGTH
KILN_BINARY_HEADER_LENGTH="$(python3 "$ROOT/bench/serve/binary_body.py" "$KILN_BINARY_BODY")"
declare -A RUN=([cnn]=cnn [cnn-binary]=cnn [text]=text)
serve() {  # serve NAME MAX_BATCH: starts the server with model NAME and waits until it is ready
  "$KILN" serve --model "$1=$WORK/${RUN[$1]}" --port "$port" --max-batch "$2" --max-delay-us 2000 --max-queue 4096 \
    --precision "${PRECISION:-fp32}" ${MODEL_THREADS:+--threads "$MODEL_THREADS"} \
    >"$WORK/serve.log" 2>&1 &
  SERVER=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.1; done
}
# One image per KServe v2 request to the CNN; one text per /v1/classify request to the text classifier.
declare -A URL=([cnn]="v2/models/cnn/infer" [cnn-binary]="v2/models/cnn-binary/infer" [text]="v1/classify")
declare -A SCRIPT=([cnn]="infer.lua" [cnn-binary]="infer_binary.lua" [text]="classify.lua")
for model in ${MODELS:-cnn cnn-binary text}; do
  echo "$model:"
  echo "| max batch | concurrency | requests/s | p50 ms | p99 ms | errors | mean batch |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for max_batch in 64 1; do
    serve "$model" "$max_batch"
    for c in 1 8 64 256; do
      before="$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^kiln_batch_size_(sum|count)/ {print $2}' | xargs)"
      line="$(wrk -t"$(( c < 2 ? 1 : 2 ))" -c"$c" -d"$DURATION" --timeout 30s -s "$ROOT/bench/serve/${SCRIPT[$model]}" \
        "http://127.0.0.1:$port/${URL[$model]}" | grep RESULT)"
      after="$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^kiln_batch_size_(sum|count)/ {print $2}' | xargs)"
      mean="$(python3 -c "b='$before'.split() or ['0','0']; a='$after'.split(); print(f'{(float(a[0])-float(b[0]))/max(1,float(a[1])-float(b[1])):.1f}')")"
      eval "$(echo "$line" | sed 's/RESULT //')"
      echo "| $max_batch | $c | $rps | $p50_ms | $p99_ms | $errors | $mean |"
    done
    kill -TERM "$SERVER"; wait "$SERVER" || true
  done
  ${MODEL_THREADS:+env OMP_NUM_THREADS="$MODEL_THREADS"} "$ROOT/build/bench_serve_raw" "$WORK/${RUN[$model]}" 64 "${PRECISION:-fp32}"
done
[ "${GENERATION:-1}" = 1 ] || exit 0
# Generation: the fortunes-gpt recipe's default model, briefly trained; with
# continuous batching (up to 32 completions per decode step) and without
# (--max-batch 1: one completion at a time).
"$KILN" train fortunes-gpt --steps 20 --no-progress --out "$WORK/gpt" >/dev/null
echo "| max batch, streams | completion tokens | seconds | tokens/s |"
echo "|---|---:|---:|---:|"
for max_batch in 32 1; do
  "$KILN" serve --model gpt="$WORK/gpt" --port "$port" --max-batch "$max_batch" >"$WORK/serve.log" 2>&1 &
  SERVER=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.1; done
  python3 "$ROOT/bench/serve/generation_bench.py" "http://127.0.0.1:$port" gpt "$max_batch, "
  kill -TERM "$SERVER"; wait "$SERVER" || true
done
echo "($(nproc) cores; wrk -t2 -d$DURATION; $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg))"
