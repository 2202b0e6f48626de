#!/usr/bin/env bash
# Runs on the GPU machine (called by scripts/run_on_device.sh with OUT and
# KILN_DIST set): Kiln and PyTorch on the same device in one run, and the
# CPU-versus-GPU comparison. Writes $OUT/results.jsonl and $OUT/results.md.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIST="${KILN_DIST:-dist/gpu}"
OUT="${OUT:-out/gpu-bench}"
BATCH="${GPT_BATCH:-16}"
mkdir -p "$OUT"
J="$OUT/results.jsonl"
: > "$J"
run() { echo "== $*" >&2; "$@" 2>>"$OUT/errors.log" | tee -a "$J"; }

# Kiln and PyTorch alternate, the same number of rounds each, so drift on
# the device hits both alike; the table reports each side's median.
# PARTS (default "matmul attention gpt"; matmul: the 8192^3 product and the 1 GiB
# copy) picks what the rounds measure: PARTS=gpt is the GPT-2 step alone, the
# short check after a change to training.
ROUNDS="${ROUNDS:-3}" PARTS=" ${PARTS:-matmul attention gpt} "
for _ in $(seq "$ROUNDS"); do
  if [[ "$PARTS" == *" matmul "* ]]; then
    run "$DIST/bench_gpu" matmul --n 8192 --dtype bf16 --iters 20
    run python3 "$HERE/torch_gpu_bench.py" matmul --n 8192 --dtype bf16 --iters 20
    run "$DIST/bench_gpu" copy --mib 1024 --iters 20
    run python3 "$HERE/torch_gpu_bench.py" copy --mib 1024 --iters 20
  fi
  [[ "$PARTS" == *" attention "* ]] && for T in 1024 4096; do
    for D in 64 128; do
      run "$DIST/bench_gpu" attention --T $T --D $D --dtype bf16 --iters 10
      run python3 "$HERE/torch_gpu_bench.py" attention --block $T --width $D --dtype bf16 --iters 10
      # Kiln's own mma.sync kernels, with cuDNN's fused attention switched off.
      KILN_CUDNN=0 "$DIST/bench_gpu" attention --T $T --D $D --dtype bf16 --iters 10 2>>"$OUT/errors.log" |
        sed 's/"impl":"kiln"/"impl":"kiln-own"/' | tee -a "$J"
    done
  done
  if [[ "$PARTS" == *" gpt "* ]]; then
    run "$DIST/bench_gpu" gpt --batch "$BATCH" --precision bf16 --iters 10
    run python3 "$HERE/torch_gpu_bench.py" gpt --batch "$BATCH" --iters 10
  fi
done
# Where Kiln's GPT-2 step spends its time, op by op (each op synchronised).
"$DIST/bench_gpu" gpt --batch "$BATCH" --precision bf16 --iters 3 --profile > /dev/null 2> "$OUT/gpt_profile.txt"
"$DIST/bench_gpu" gpt --batch "$BATCH" --precision bf16 --iters 3 --profile-shapes > /dev/null 2> "$OUT/gpt_profile_shapes.txt"
if [ "${SKIP_COMPARE:-0}" != 1 ]; then  # SKIP_COMPARE=1: only the GPU against PyTorch
  run "$DIST/bench_gpu" compare --n 10000
  run python3 "$HERE/torch_gpu_bench.py" compare --n 10000
  run "$DIST/bench_gpu" allreduce --mib 256 --iters 20  # one rank over NCCL (docs/DISTRIBUTED.md)
fi

python3 - "$J" > "$OUT/results.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def median(bench, impl, key):
    v = sorted(r[key] for r in rows if r["bench"] == bench and r.get("impl") == impl)
    if not v:
        return float("nan")
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2
print("| measure (median) | Kiln | PyTorch | Kiln / PyTorch |\n|---|---|---|---|")
for bench, key, label in [("matmul", "tflops", "bf16 matmul 8192^3, TFLOP/s"),
                          ("copy", "gbs", "device-to-device copy, GB/s"),
                          ("gpt", "tokens_per_s", "GPT-2 124M bf16 training, tokens/s")]:
    k, t = median(bench, "kiln", key), median(bench, "torch", key)
    print(f"| {label} | {k:.1f} | {t:.1f} | {k / t:.3f} |")
print(f"| GPT-2 124M MFU | {median('gpt', 'kiln', 'mfu'):.3f} | {median('gpt', 'torch', 'mfu'):.3f} | |")
for T, D in [(1024, 64), (1024, 128), (4096, 64), (4096, 128)]:
    def att(impl):
        v = sorted(r["tflops"] for r in rows if r["bench"] == "attention" and r.get("impl") == impl
                   and r["T"] == T and r["D"] == D)
        return v[len(v) // 2] if v else float("nan")
    k, t, own = att("kiln"), att("torch"), att("kiln-own")
    print(f"| causal attention fwd+bwd bf16, T={T}, D={D}, TFLOP/s | {k:.1f} | {t:.1f} | {k / t:.3f} |")
    print(f"| ... Kiln's own kernels (KILN_CUDNN=0), TFLOP/s | {own:.1f} | {t:.1f} | {own / t:.3f} |")
    def fwd(impl):
        v = sorted(r.get("forward_ms", float("nan")) for r in rows if r["bench"] == "attention"
                   and r.get("impl") == impl and r["T"] == T and r["D"] == D)
        return v[len(v) // 2] if v else float("nan")
    kf, tf = fwd("kiln"), fwd("torch")
    print(f"| ... of which the forward, ms | {kf:.3f} | {tf:.3f} | {tf / kf:.3f} |")
print("\n(medians of the rounds; each side ran the same number of rounds, interleaved)")
print("\nThe same work on the machine's CPU (all cores) and its GPU, each with Kiln and with eager PyTorch:\n")
print("| work | Kiln CPU ms | Kiln GPU ms | Kiln GPU speed-up | PyTorch CPU ms | PyTorch GPU ms | PyTorch GPU speed-up |")
print("|---|---|---|---|---|---|---|")
compare = {(r["work"], r["impl"]): r for r in rows if r["bench"] == "compare"}
for work in dict.fromkeys(w for w, _ in compare):
    cells = []
    for impl in ("kiln", "torch"):
        r = compare.get((work, impl))
        cells += [f"{r['cpu_ms']:.1f}", f"{r['device_ms']:.2f}", f"{r['speedup']:.0f}x"] if r else ["-", "-", "-"]
    print(f"| {work} | " + " | ".join(cells) + " |")
PY
cat "$OUT/results.md"
