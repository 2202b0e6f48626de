#!/usr/bin/env bash
# Does --precision bf16 hold accuracy on the CPU? Trains each recipe with its
# defaults twice, fp32 and bf16 (same seed), and checks the bounds:
# Fashion-MNIST test accuracy within 0.3 points of fp32, and the GPT's
# validation loss within 1% of fp32. Prints a table with wall times; exits 1
# if a bound is missed.
#
#   bench/bf16_accuracy.sh                       # fashion-mlp fashion-cnn fortunes-gpt (~8 min on 2 cores)
#   RECIPES=fashion-mlp bench/bf16_accuracy.sh
#   EXTRA_ARGS="--steps 20" bench/bf16_accuracy.sh   # a quick check of the script itself
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KILN="${KILN:-$ROOT/build/kiln}"
RECIPES="${RECIPES:-fashion-mlp fashion-cnn fortunes-gpt}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kiln-bf16-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# Trains recipe $1 at precision $2; prints "metric seconds".
train() {
  local log="$WORK/$1-$2.log" start
  start=$(date +%s.%N)
  # shellcheck disable=SC2086  # EXTRA_ARGS is a list of flags
  if ! "$KILN" train "$1" --precision "$2" --no-progress --out "$WORK/$1-$2" ${EXTRA_ARGS:-} >"$log" 2>&1; then
    echo "bench/bf16_accuracy.sh: kiln train $1 --precision $2 failed:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  grep -q "training in fp32" "$log" && { echo "bench/bf16_accuracy.sh: this CPU has no bf16 instructions" >&2; exit 1; }
  local metric
  metric=$(sed -n -e 's/^test accuracy: \([0-9.]*\).*/\1/p' -e 's/^validation: *\([0-9.]*\) nats.*/\1/p' "$log" | tail -n1)
  [ -n "$metric" ] || { echo "bench/bf16_accuracy.sh: no result in $log" >&2; exit 1; }
  echo "$metric $(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { print a - b }')"
}

status=0
printf '| recipe | metric | fp32 | bf16 | bound | result | wall fp32 | wall bf16 |\n|---|---|---:|---:|---|---|---:|---:|\n'
for recipe in $RECIPES; do
  read -r m32 s32 <<<"$(train "$recipe" fp32)"
  read -r m16 s16 <<<"$(train "$recipe" bf16)"
  case "$recipe" in
    fortunes-gpt)
      metric="validation loss (nats/token)"; bound="bf16 <= 1.01 x fp32"
      ok=$(awk -v a="$m16" -v b="$m32" 'BEGIN { print (a <= 1.01 * b) }') ;;
    *)
      metric="test accuracy"; bound="bf16 >= fp32 - 0.003"
      ok=$(awk -v a="$m16" -v b="$m32" 'BEGIN { print (a >= b - 0.003) }') ;;
  esac
  result=pass
  [ "$ok" = 1 ] || { result=FAIL; status=1; }
  printf '| %s | %s | %s | %s | %s | %s | %.0f s | %.0f s |\n' "$recipe" "$metric" "$m32" "$m16" "$bound" "$result" "$s32" "$s16"
done
echo "(kiln train <recipe> --precision fp32|bf16 --no-progress, defaults; $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg))"
exit $status
