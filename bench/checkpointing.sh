#!/usr/bin/env bash
# Activation checkpointing: activation memory and step time of a 12-layer
# GPT in each mode, measured by kiln train itself (metrics.jsonl: the
# allocator's peak activation bytes, and items/s per step).
#
#   bench/checkpointing.sh                     # 12 layers, 256 wide, T=256, batch 8, 2 threads
#   LAYERS=12 WIDTH=384 T=256 BATCH=8 STEPS=8 bench/checkpointing.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KILN="${KILN:-$ROOT/build/kiln}"
LAYERS="${LAYERS:-12}" WIDTH="${WIDTH:-256}" HEADS="${HEADS:-4}" T="${T:-256}" BATCH="${BATCH:-8}"
STEPS="${STEPS:-8}" THREADS="${THREADS:-2}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kiln-ckpt-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
for mode in none selective blocks; do
  "$KILN" train fortunes-gpt --n-layer "$LAYERS" --n-embd "$WIDTH" --n-head "$HEADS" --block-size "$T" \
    --batch-size "$BATCH" --steps $((STEPS + 10)) --stop-after "$STEPS" --threads "$THREADS" \
    --checkpoint-activations "$mode" --no-progress --out "$WORK/$mode" > "$WORK/$mode.log" 2>&1
done
/usr/bin/python3 - "$WORK" "$STEPS" <<'PY'
import json, statistics, sys
work, steps = sys.argv[1], int(sys.argv[2])
res = {}
for mode in ["none", "selective", "blocks"]:
    lines = [json.loads(l) for l in open(f"{work}/{mode}/metrics.jsonl")]
    train = [l for l in lines if l["kind"] == "train"]
    peak = max(l["memory"]["cpu"]["peak"]["activations"] for l in train)
    rate = statistics.median(l["items_per_s"] for l in train[2:])  # after two warm-up steps
    res[mode] = (peak, rate)
base_peak, base_rate = res["none"]
print("| mode | peak activations | vs none | tokens/s (median) | step time vs none |")
print("|---|---:|---:|---:|---:|")
for mode, (peak, rate) in res.items():
    print(f"| {mode} | {peak / 2**20:.1f} MiB | {peak / base_peak:.3f} ({100 * (1 - peak / base_peak):.1f}% less) "
          f"| {rate:,.0f} | {base_rate / rate:.2f}x |")
PY
echo "(kiln train fortunes-gpt --n-layer $LAYERS --n-embd $WIDTH --n-head $HEADS --block-size $T --batch-size $BATCH, $STEPS steps, $THREADS threads; $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg))"
