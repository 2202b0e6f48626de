#!/usr/bin/env bash
# Kiln's decoding products against ggml's vec_dot on the same blocks (bench/hf/kquant_vs_ggml.cpp), linked
# against Kiln's build and a llama.cpp build's libggml-cpu, on Kiln's AVX-512 (where the CPU has it) and AVX2 paths.
#   BUILD_DIR=build LLAMA_CPP=DIR [LLAMA_BUILD=build] bench/hf/kquant_vs_ggml.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$(cd "${BUILD_DIR:-$ROOT/build}" && pwd)"
LLAMA_CPP="${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp source tree with a build (bench/hf/run.sh makes one)}"
GGML_LIBS="$LLAMA_CPP/${LLAMA_BUILD:-build}/bin"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# Kiln's libraries, as its own bench links them (the words after "-o kiln_quant_bench" in the Ninja build
# scripts/build.sh makes).
libs="$(ninja -C "$BUILD" -t commands kiln_quant_bench | tail -1 | sed 's/.*-o kiln_quant_bench//; s/&& :$//')"
(cd "$BUILD" && c++ -std=gnu++20 -O2 -march=x86-64-v3 -fopenmp -I"$ROOT" -I"$LLAMA_CPP/ggml/include" \
  "$ROOT/bench/hf/kquant_vs_ggml.cpp" -o "$WORK/kquant_vs_ggml" $libs -L"$GGML_LIBS" -lggml-cpu -lggml-base \
  -Wl,-rpath,"$GGML_LIBS")
for isa in avx512 avx2; do  # (the scalar path gives the same bits as both: tests/test_quantized.cpp)
  KILN_MAX_ISA=$isa "$WORK/kquant_vs_ggml"
done
