#!/usr/bin/env bash
# f32 GEMM throughput of the CPU libraries Debian packages (OpenBLAS, oneDNN,
# BLIS, libxsmm) on the MLP's and GPT's shapes, at 1 and 2 threads: the
# measurement behind kiln/cpu/gemm.h's choice. Also oneDNN's bf16 product
# (bf16 operands, f32 result), to see whether bf16 is faster on this CPU. Libraries that are not
# installed are skipped (apt-get install libblis-openmp-dev libxsmm-dev adds
# the two Kiln does not need).
#   bench/gemm_libraries.sh            # THREADS="1 2" by default
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
THREADS="${THREADS:-1 2}"
WORK="$(mktemp -d /tmp/kiln_gemm_libs.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
SRC="$ROOT/bench/gemm_libraries.cpp"
CXX="${CXX:-g++} -O2 -std=c++17 -fopenmp"

built=()
try_build() {  # name, flags...
  local name="$1"; shift
  if $CXX "$SRC" -o "$WORK/$name" "$@" 2>"$WORK/$name.log"; then built+=("$name"); else echo "skipping $name (not installed?)" >&2; fi
}
try_build openblas -DUSE_OPENBLAS -I/usr/include/x86_64-linux-gnu/openblas-openmp \
  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas
try_build onednn -DUSE_DNNL -ldnnl
try_build blis -DUSE_BLIS -I/usr/include/x86_64-linux-gnu/blis-openmp \
  -L/usr/lib/x86_64-linux-gnu/blis-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/blis-openmp -lblis
# bf16 operands, f32 results: whether bf16 would make the products faster on this CPU.
try_build onednn-bf16 -DUSE_DNNL_BF16 -ldnnl
try_build libxsmm -DUSE_XSMM /usr/lib/libxsmmext.a /usr/lib/libxsmm.a \
  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldl -lpthread

# Kiln's own defaults: passive OpenMP waits, and OpenBLAS's kernels for this
# CPU family (Debian's OpenBLAS falls back to generic ones on CPUs it does not
# recognise, kiln/cpu/runtime_defaults.cpp).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
grep -q avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-SKYLAKEX}"
RAW="$WORK/raw.jsonl"
for t in $THREADS; do
  for lib in "${built[@]}"; do OMP_NUM_THREADS=$t "$WORK/$lib" "$t" >>"$RAW"; done
done

python3 - "$RAW" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
libs = list(dict.fromkeys(r["library"] for r in rows))
for t in sorted({r["threads"] for r in rows}):
    print(f"\n{t} thread(s), GFLOP/s (the best f32 library per shape in bold; onednn-bf16 rounds its operands to bf16)\n")
    print("| shape | " + " | ".join(libs) + " |")
    print("|---|" + "---:|" * len(libs))
    for shape in dict.fromkeys(r["shape"] for r in rows):
        got = {r["library"]: r for r in rows if r["threads"] == t and r["shape"] == shape}
        ref = got[libs[0]]["checksum"]
        for lib, r in got.items():  # a benchmark of a wrong product is worthless (bf16 rounds its operands)
            if abs(r["checksum"] - ref) > (1e-2 if "bf16" in lib else 1e-4) * abs(ref):
                sys.exit(f"{lib} computed a different product for {shape}: {r['checksum']} vs {ref}")
        best = max(r["gflops"] for l, r in got.items() if "bf16" not in l)
        cells = [(f"**{got[l]['gflops']:.0f}**" if got[l]["gflops"] == best else f"{got[l]['gflops']:.0f}") if l in got else "-" for l in libs]
        print(f"| {shape} | " + " | ".join(cells) + " |")
PY
