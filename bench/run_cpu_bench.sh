#!/usr/bin/env bash
# CPU training throughput, Kiln against PyTorch (Debian's 1.13, and 2.x from
# PyPI eager and with torch.compile), and Kiln's matrix product
# against raw OpenBLAS. Builds kiln_bench if needed, then for each thread count
# runs every model in Kiln and in PyTorch back to back, REPEATS times
# interleaved, and prints markdown tables of the medians.
#
#   bench/run_cpu_bench.sh                      # threads 1 and 2, 3 repeats
#   THREADS="1 2 4" REPEATS=5 bench/run_cpu_bench.sh
#   PRECISIONS="fp32 bf16" bench/run_cpu_bench.sh   # bf16: Kiln's --precision bf16 against PyTorch's CPU autocast
#   MAX_ISA=avx2 bench/run_cpu_bench.sh         # every engine capped at AVX2, as on a Zen 3 (see below)
#
# Settings (environment): THREADS, REPEATS, MODELS ("mlp cnn gpt"),
# BUILD_DIR (build-bench), PYTHON (/usr/bin/python3: Debian's torch is
# importable only there), RAW (file for the raw JSON lines; a temp file if unset),
# REPORT_ONLY (a RAW file from an earlier run: print its tables, run nothing),
# MAX_ISA (avx2 or avx512: caps Kiln with KILN_MAX_ISA and PyTorch with its
# own switches, ATen's kernels, MKL, oneDNN and OpenBLAS, so both run the
# code a CPU without the higher instructions would).
# Each engine runs with its own default OpenMP wait policy: kiln_bench makes
# idle threads spin briefly, then wait passively (kiln/cpu/runtime_defaults.h),
# PyTorch keeps libgomp's longer spinning. OMP_WAIT_POLICY=PASSIVE bench/run_cpu_bench.sh gives both the same
# policy (Kiln keeps a value the user set).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
THREADS="${THREADS:-1 2}"
REPEATS="${REPEATS:-3}"
MODELS="${MODELS:-mlp cnn gpt}"
PRECISIONS="${PRECISIONS:-fp32}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-bench}"
PYTHON="${PYTHON:-/usr/bin/python3}"
# PyTorch 2 from PyPI, in a cached venv outside the repo (bench/torch2_venv.sh); TORCH2=0 leaves it out.
TORCH2_PYTHON=""
[[ "${TORCH2:-1}" != 0 && -z "${REPORT_ONLY:-}" ]] && TORCH2_PYTHON="$("$ROOT/bench/torch2_venv.sh")"
case "${MAX_ISA:-}" in
  "") ;;
  avx2) export KILN_MAX_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
          ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell ;;
  avx512) export KILN_MAX_ISA=avx512 ATEN_CPU_CAPABILITY=avx512 MKL_ENABLE_INSTRUCTIONS=AVX512 \
            ONEDNN_MAX_CPU_ISA=AVX512_CORE OPENBLAS_CORETYPE=SkylakeX ;;
  *) echo "error: MAX_ISA is avx2 or avx512, got '$MAX_ISA'" >&2; exit 2 ;;
esac
RAW="${RAW:-$(mktemp /tmp/kiln_cpu_bench.XXXXXX.jsonl)}"

# Steps and warmup per model, sized so a repeat takes a few seconds on 1 core.
steps_for() { case "$1" in mlp) echo "60 5" ;; cnn) echo "20 3" ;; gpt) echo "15 3" ;; esac; }

print_tables() {
  "$PYTHON" - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
for r in rows:  # older raw files call Debian's 1.13 just "torch", and ran fp32 only
    if r.get("engine") == "torch":
        r["engine"] = "torch1"
    r.setdefault("precision", "fp32")
models = [r for r in rows if r["model"] != "matmul"]
isas = sorted({r["isa"] for r in models if "isa" in r})
if isas:
    print(f"Kiln dispatched up to: {', '.join(isas)}\n")
keys = sorted({(r["model"], r["precision"], r["threads"]) for r in models},
              key=lambda k: (["mlp", "cnn", "gpt"].index(k[0]), k[1], k[2]))
engines = [e for e in ["torch1", "torch2-eager", "torch2-compile"] if any(r["engine"] == e for r in models)]
names = {"torch1": "PyTorch 1.13", "torch2-eager": "PyTorch 2 eager", "torch2-compile": "PyTorch 2 compiled"}
if keys:
    print("| model | precision | threads | unit | Kiln | " + " | ".join(names[e] for e in engines) + " | Kiln / best | per repeat |")
    print("|---|---|---:|---|---:|" + "---:|" * len(engines) + "---:|---|")
for model, precision, threads in keys:
    def runs(engine, precision=precision):
        return [r["items_per_s"] for r in models
                if (r["model"], r["precision"], r["threads"], r["engine"]) == (model, precision, threads, engine)]
    k = runs("kiln")
    peers = {e: runs(e) for e in engines}
    unit = next(r["unit"] for r in models if r["model"] == model)
    best = max(statistics.median(v) for v in peers.values() if v)
    # The runs were interleaved: pair each repeat's Kiln with that repeat's best peer.
    each = ", ".join(f"{a / max(p[i] for p in peers.values() if len(p) > i):.2f}" for i, a in enumerate(k))
    cells = " | ".join(f"{statistics.median(peers[e]):,.0f}" if peers[e] else "-" for e in engines)
    print(f"| {model} | {precision} | {threads} | {unit} | {statistics.median(k):,.0f} | {cells} | **{statistics.median(k) / best:.2f}** | {each} |")
print()
# bf16 against fp32, Kiln's own speedup (the issue asks 1.5x).
pairs = [(m, t) for m, p, t in keys if p == "bf16" and (m, "fp32", t) in keys]
if pairs:
    print("| model | threads | Kiln bf16 / Kiln fp32 |\n|---|---:|---:|")
    for m, t in pairs:
        def kiln(p):
            return statistics.median(r["items_per_s"] for r in models if (r["model"], r["precision"], r["threads"], r["engine"]) == (m, p, t, "kiln"))
        print(f"| {m} | {t} | {kiln('bf16') / kiln('fp32'):.2f} |")
    print()
if not any(r["model"] == "matmul" for r in rows):
    sys.exit(0)
# The roofline: the MLP step's matrix-product GFLOP/s against the machine's
# fp32 GEMM peak (the faster of OpenBLAS and Kiln's GEMM, oneDNN, on the
# largest squares, same threads, same run).
peaks = {r["threads"]: max(max(s["openblas_gflops"], s["kiln_backend_gflops"]) for s in r["results"]
                           if s["shape"].startswith("square"))
         for r in rows if r["model"] == "matmul"}
mlp = [r for r in models if r["engine"] == "kiln" and r["model"] == "mlp" and "gflops" in r and r["precision"] == "fp32"]
if mlp:
    print("| threads | fp32 GEMM peak GFLOP/s | Kiln MLP step GFLOP/s | share of peak |\n|---:|---:|---:|---:|")
    for t in sorted(peaks):
        g = [r["gflops"] for r in mlp if r["threads"] == t]
        if g:
            print(f"| {t} | {peaks[t]:.1f} | {statistics.median(g):.1f} | **{statistics.median(g) / peaks[t]:.0%}** |")
    print()
print("| shape (M x N x K) | threads | Kiln GFLOP/s | OpenBLAS GFLOP/s | Kiln / OpenBLAS | backend op, preallocated out / OpenBLAS |")
print("|---|---:|---:|---:|---:|---:|")
for r in rows:
    if r["model"] != "matmul":
        continue
    for s in r["results"]:
        t = ("A^T" if s["transA"] else "") + (" B^T" if s["transB"] else "")
        name = f'{s["shape"]} ({s["M"]}x{s["N"]}x{s["K"]}{", " + t.strip() if t else ""})'
        pre = f'{s["kiln_backend_gflops"] / s["openblas_gflops"]:.2f}' if "kiln_backend_gflops" in s else "-"
        print(f'| {name} | {r["threads"]} | {s["kiln_gflops"]:.1f} | {s["openblas_gflops"]:.1f} | {s["ratio"]:.2f} | {pre} |')
EOF
}

# REPORT_ONLY=file: print the tables of an earlier run's raw results and stop.
if [[ -n "${REPORT_ONLY:-}" ]]; then
  print_tables "$REPORT_ONLY"
  exit 0
fi

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  echo "configuring $BUILD_DIR ..." >&2
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DKILN_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
build_log="$(mktemp)"
ninja -C "$BUILD_DIR" kiln_bench >"$build_log" 2>&1 || { cat "$build_log" >&2; exit 1; }
rm -f "$build_log"
"$PYTHON" -c "import torch" 2>/dev/null || { echo "error: $PYTHON cannot import torch (set PYTHON=...)" >&2; exit 1; }

# A peer that crashes (PyTorch 2's compiled MLP aborts in malloc on a Zen 5
# with AVX-512) is reported and left out of its cell, not the whole run.
peer() {
  local out
  if out="$("$@" 2>&1 >>"$RAW")"; then return; fi
  echo "  left out (it failed: $(tail -1 <<<"$out")): ${*:2}" >&2
}

: >"$RAW"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "threads: $THREADS; repeats: $REPEATS; OMP_WAIT_POLICY: ${OMP_WAIT_POLICY:-unset}; raw results: $RAW"
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1); MAX_ISA: ${MAX_ISA:-none}"
for py in "$PYTHON" $TORCH2_PYTHON; do
  "$py" -c 'import torch; print(f"PyTorch {torch.__version__}:", [l.strip() for l in torch.__config__.show().splitlines() if "CPU capability" in l][0])'
done
for t in $THREADS; do
  for r in $(seq "$REPEATS"); do
    for m in $MODELS; do
      for p in $PRECISIONS; do
        read -r steps warmup <<<"$(steps_for "$m")"
        args=(--model "$m" --threads "$t" --steps "$steps" --warmup "$warmup" --precision "$p")
        "$BUILD_DIR/kiln_bench" "${args[@]}" >>"$RAW"
        peer "$PYTHON" "$ROOT/bench/torch_bench.py" "${args[@]}"
        if [[ -n "$TORCH2_PYTHON" ]]; then
          peer "$TORCH2_PYTHON" "$ROOT/bench/torch_bench.py" "${args[@]}"
          peer "$TORCH2_PYTHON" "$ROOT/bench/torch_bench.py" "${args[@]}" --compile
        fi
        echo "  threads $t, repeat $r/$REPEATS: $m $p done" >&2
      done
    done
  done
  "$BUILD_DIR/kiln_bench" --model matmul --threads "$t" >>"$RAW"
  echo "  threads $t: matmul done" >&2
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

print_tables "$RAW"
