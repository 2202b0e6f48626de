#!/usr/bin/env bash
# kiln serve on the GPU against the CPU, in one run (called by
# scripts/run_on_device.sh with OUT and KILN_DIST set). One Fashion-MNIST-sized
# image per KServe v2 request as binary tensor data, from bench_loadgen (the
# GPU machines have no wrk), at concurrency 1, 8, 64 and 256, with dynamic
# batching (--max-batch 64) and with batch size 1; and each model's raw
# throughput in process (bench_serve_raw, batches of 1 and of 64). Writes
# $OUT/results.md.
#
# The device machines have none of Debian's packages, so no Fashion-MNIST:
# the CNN is trained for a few steps on random images of the same shape.
# Requests/s do not depend on what the weights are.
#
#   OUT=out KILN_DIST=dist/gpu bench/gpu/serve_gpu.sh
#   DEVICES="cpu:fp32" KILN_DIST=build bench/gpu/serve_gpu.sh   # the script itself, on a machine without a GPU
set -uo pipefail
DIST="${KILN_DIST:-dist/gpu}"
OUT="${OUT:-out/serve-gpu}"
SECONDS_PER_ROW="${SECONDS_PER_ROW:-5}"
DEVICES="${DEVICES:-cuda:fp32 cuda:bf16 cpu:fp32}"
mkdir -p "$OUT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kiln-serve-gpu-XXXXXX")"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 "$HERE/../serve/binary_body.py" "$WORK/body" > "$WORK/header_length"
python3 - "$WORK" <<'PY'
import gzip, os, struct, sys
work = sys.argv[1]
os.makedirs(f"{work}/data")
for part, n in [("train", 6000), ("t10k", 512)]:
    with gzip.open(f"{work}/data/{part}-images-idx3-ubyte.gz", "wb", compresslevel=1) as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28) + os.urandom(n * 784))
    with gzip.open(f"{work}/data/{part}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 2049, n) + bytes(b % 10 for b in os.urandom(n)))
PY
train_device=cpu
case "$DEVICES" in *cuda*) train_device=cuda ;; esac
KILN_FASHION_MNIST_DIR="$WORK/data" "$DIST/kiln" train fashion-cnn --steps 5 --device "$train_device" --no-progress \
  --out "$WORK/cnn" > "$OUT/train.log" 2>&1 || { echo "serve_gpu.sh: training the CNN failed (see $OUT/train.log)" >&2; exit 1; }

# metric NAME: the CNN's kiln_batch_size_NAME (sum or count) from /metrics; 0 before its first batch.
metric() {
  python3 -c "import sys, urllib.request
lines = urllib.request.urlopen(sys.argv[1] + '/metrics').read().decode().splitlines()
print(next((l.split()[-1] for l in lines if l.startswith('kiln_batch_size_' + sys.argv[2] + '{model=\"cnn\"}')), 0))" \
    "$base" "$1"
}
port=18300
base="http://127.0.0.1:$port"
R="$OUT/results.md"
{
  echo "| device | precision | max batch | concurrency | requests/s | p50 ms | p99 ms | errors | mean batch |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
} > "$R"
RAW="$OUT/raw.txt"
: > "$RAW"
for pair in $DEVICES; do
  device="${pair%%:*}" precision="${pair##*:}"
  for max_batch in 64 1; do
    "$DIST/kiln" serve --model cnn="$WORK/cnn" --port "$port" --device "$device" --precision "$precision" \
      --max-batch "$max_batch" --max-delay-us 2000 --max-queue 4096 --warmup 2 > "$OUT/serve-$device-$precision-$max_batch.log" 2>&1 &
    server=$!
    python3 -c "import sys, time, urllib.request
for _ in range(600):
    try:
        urllib.request.urlopen(sys.argv[1] + '/health'); sys.exit(0)
    except Exception: time.sleep(0.1)
sys.exit(1)" "$base" || { echo "serve_gpu.sh: the server on $device did not start" >&2; kill "$server"; continue; }
    for c in 1 8 64 256; do
      before_sum="$(metric sum)" before_count="$(metric count)"
      line="$("$DIST/bench_loadgen" --url "$base/v2/models/cnn/infer" --body "$WORK/body" \
        --header "Inference-Header-Content-Length: $(cat "$WORK/header_length")" \
        --connections "$c" --threads "$(( c < 4 ? c : 4 ))" --seconds "$SECONDS_PER_ROW")"
      mean="$(python3 -c "import sys; s0, c0, s1, c1 = map(float, sys.argv[1:]); print(f'{(s1 - s0) / max(1, c1 - c0):.1f}')" \
        "$before_sum" "$before_count" "$(metric sum)" "$(metric count)")"
      eval "$(echo "$line" | sed 's/^RESULT //')"
      echo "| $device | $precision | $max_batch | $c | $rps | $p50_ms | $p99_ms | $errors | $mean |" | tee -a "$R"
    done
    kill -TERM "$server"
    wait "$server"
  done
  for batch in 1 64; do
    "$DIST/bench_serve_raw" "$WORK/cnn" "$batch" "$precision" "$device" | tee -a "$RAW"
  done
done
{
  echo
  echo "Raw in process (bench_serve_raw):"
  echo
  sed 's/^/    /' "$RAW"
  echo
  echo "($(nproc) CPU cores; $SECONDS_PER_ROW s per row; $(date -u '+%Y-%m-%d %H:%M UTC'))"
} >> "$R"
cat "$R"
