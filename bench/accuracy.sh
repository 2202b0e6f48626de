#!/usr/bin/env bash
# Re-checks the README's accuracy claims with one command: trains each
# Fashion-MNIST recipe with its defaults into a fresh directory and checks
# its test accuracy against the bar (fashion-mlp >= 0.89, fashion-cnn >= 0.91).
# Prints accuracy and wall time per recipe; exits 1 if a bar is missed.
#
#   bench/accuracy.sh                      # both recipes, defaults (~10 min on 2 cores)
#   RECIPES=fashion-mlp bench/accuracy.sh  # one of them
#   EXTRA_ARGS="--steps 30" MLP_BAR=0.5 bench/accuracy.sh   # a quick check of the script itself
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KILN="${KILN:-$ROOT/build/kiln}"
RECIPES="${RECIPES:-fashion-mlp fashion-cnn}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kiln-accuracy-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
status=0
printf '| recipe | test accuracy | bar | wall time | result |\n|---|---:|---:|---:|---|\n'
for recipe in $RECIPES; do
  case "$recipe" in
    fashion-mlp) bar="${MLP_BAR:-0.89}" ;;
    fashion-cnn) bar="${CNN_BAR:-0.91}" ;;
    *) echo "bench/accuracy.sh: no bar for recipe '$recipe'" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  # shellcheck disable=SC2086  # EXTRA_ARGS is a list of flags
  if ! "$KILN" train "$recipe" --no-progress --out "$WORK/$recipe" ${EXTRA_ARGS:-} > "$WORK/$recipe.log" 2>&1; then
    echo "bench/accuracy.sh: kiln train $recipe failed:" >&2
    tail -n 20 "$WORK/$recipe.log" >&2
    exit 1
  fi
  seconds=$(( $(date +%s) - start ))
  accuracy=$(sed -n 's/^test accuracy: \([0-9.]*\).*/\1/p' "$WORK/$recipe.log" | tail -n1)
  if [ -z "$accuracy" ]; then
    echo "bench/accuracy.sh: no test accuracy in the output of kiln train $recipe" >&2
    exit 1
  fi
  result=pass
  if ! awk -v a="$accuracy" -v b="$bar" 'BEGIN { exit !(a >= b) }'; then
    result=FAIL
    status=1
  fi
  printf '| %s | %s | >= %s | %dm %02ds | %s |\n' "$recipe" "$accuracy" "$bar" $((seconds / 60)) $((seconds % 60)) "$result"
done
echo "(kiln train <recipe> --no-progress, defaults; $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg))"
exit $status
