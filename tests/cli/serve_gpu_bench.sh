#!/usr/bin/env bash
# bench/gpu/serve_gpu.sh, the serving benchmark a lent GPU runs, here on the
# CPU alone (DEVICES=cpu:fp32, 1 s a row): it must work before the one GPU
# call that runs it. Every row answered without errors, batches larger than
# 1 at concurrency 64, and the raw in-process figures.
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$(dirname "$KILN")"
mkdir -p "$WORK/bundle"
for b in bench_loadgen bench_serve_raw; do ln -s "$BUILD/$b" "$WORK/bundle/$b"; done
ln -s "$KILN" "$WORK/bundle/kiln"
run 0 env OUT="$WORK/out" KILN_DIST="$WORK/bundle" DEVICES="cpu:fp32" SECONDS_PER_ROW=1 bash "$ROOT/bench/gpu/serve_gpu.sh"
rows="$(grep -cE '^\| cpu \| fp32 \| (64|1) \| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| 0 \| [0-9.]+ \|$' "$WORK/out/results.md")"
[ "$rows" = 8 ] || fail "results.md should have 8 error-free rows, has $rows"
grep -qE '^\| cpu \| fp32 \| 64 \| 64 \| .* \| ([2-9]|[1-9][0-9])\.[0-9] \|$' "$WORK/out/results.md" ||
  fail "no batches larger than 1 at concurrency 64 with --max-batch 64"
expect "raw in-process throughput \(fashion-cnn, batches of 64, fp32, cpu\): [0-9.]+ images/s"
echo "ok"
