#!/usr/bin/env bash
# Time to 91% on Fashion-MNIST, Kiln against PyTorch 2 with the same recipe
# (bench/torch_time_to_accuracy.py says what "the same" covers: model, data
# order, optimizer and schedule), on the same threads, interleaved, REPEATS
# times. Both count seconds of training steps until the test accuracy,
# checked every EVAL_EVERY steps, first reaches TARGET.
#
#   bench/time_to_accuracy.sh               # fashion-fast, 4 epochs, 2 threads, target 0.91, test every 50 steps, 3 repeats
#   RECIPE=fashion-cnn EPOCHS=6 THREADS=1 bench/time_to_accuracy.sh
#
# Both engines wait passively between parallel regions (OMP_WAIT_POLICY;
# Kiln's default adds a brief spin): PyTorch's default spinning collapses when anything else
# shares the cores (measured: one epoch took 77 s instead of 19 s). Set
# OMP_WAIT_POLICY=ACTIVE for PyTorch's default on a quiet machine.
set -euo pipefail
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KILN="${KILN:-$ROOT/build/kiln}"
THREADS="${THREADS:-2}"
RECIPE="${RECIPE:-fashion-fast}"
EPOCHS="${EPOCHS:-4}"
EVAL_EVERY="${EVAL_EVERY:-50}"
TARGET="${TARGET:-0.91}"
REPEATS="${REPEATS:-3}"
TORCH2_PYTHON="$("$ROOT/bench/torch2_venv.sh")"
WORK="$(mktemp -d /tmp/kiln_tta.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$RECIPE recipe, $EPOCHS epochs, batch 128, $THREADS threads, target test accuracy $TARGET tested every $EVAL_EVERY steps, OMP_WAIT_POLICY=$OMP_WAIT_POLICY"
results=()
for r in $(seq "$REPEATS"); do
  "$KILN" train "$RECIPE" --epochs "$EPOCHS" --threads "$THREADS" --target-accuracy "$TARGET" \
    --eval-every "$EVAL_EVERY" --no-progress \
    --out "$WORK/kiln-$r" >"$WORK/kiln-$r.log" 2>&1 || { tail -20 "$WORK/kiln-$r.log" >&2; exit 1; }
  kiln_s=$(sed -n 's/^time to target: \([0-9.]*\) s.*/\1/p' "$WORK/kiln-$r.log")
  torch_json=$("$TORCH2_PYTHON" "$ROOT/bench/torch_time_to_accuracy.py" --recipe "$RECIPE" --threads "$THREADS" \
    --epochs "$EPOCHS" --eval-every "$EVAL_EVERY" --target "$TARGET")
  torch_s=$(python3 -c 'import json,sys; v=json.loads(sys.argv[1])["seconds_to_target"]; print("" if v is None else f"{v:.1f}")' "$torch_json")
  echo "repeat $r: Kiln ${kiln_s:-not reached} s; PyTorch 2 ${torch_s:-not reached} s"
  grep -E "^step [0-9]+ .*: test accuracy" "$WORK/kiln-$r.log" | tail -n 3 | sed 's/^/  kiln   /'
  python3 - "$torch_json" <<'PY'
import json, sys
for t in json.loads(sys.argv[1])["tests"][-3:]:
    print(f"  torch2 step {t['step']}: test accuracy {t['test_accuracy']:.4f} after {t['train_s']:.1f} s of training")
PY
  results+=("${kiln_s:-nan} ${torch_s:-nan}")
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${results[@]}" | python3 -c '
import math, statistics, sys
rows = [tuple(float(v) for v in line.split()) for line in sys.stdin if line.strip()]
k = [a for a, _ in rows if not math.isnan(a)]
t = [b for _, b in rows if not math.isnan(b)]
fmt = lambda v: f"{statistics.median(v):.1f} s" if v else "not reached"
print("\n| engine | seconds to target (median) | per repeat |\n|---|---:|---|")
print(f"| Kiln | {fmt(k)} | " + ", ".join(f"{a:.1f}" for a, _ in rows) + " |")
print(f"| PyTorch 2 (eager, fused AdamW) | {fmt(t)} | " + ", ".join(f"{b:.1f}" for _, b in rows) + " |")
if k and t:
    print(f"\nPyTorch 2 / Kiln: {statistics.median(t) / statistics.median(k):.2f}x (Kiln faster when above 1)")
'
