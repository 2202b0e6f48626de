#!/usr/bin/env bash
# Each architecture's GGUF fixture (tests/hf/fixtures/gguf-archs, made by
# tests/hf/make_gguf_arch_fixtures.py) scored by `kiln perplexity` and by
# llama.cpp's llama-perplexity on the same text: the same chunked perplexity
# (--ctx 64, 3 chunks, the second half of each scored). The F16 files are
# first widened to F32 by llama-quantize (the same values), since llama.cpp
# rounds activations to F16 for F16 weights and Kiln's fp32 run does not.
#   BUILD_DIR=build LLAMA_CPP=DIR bench/hf/gguf_archs_vs_llama_cpp.sh
# LLAMA_CPP: a llama.cpp source tree with build/bin/llama-perplexity and llama-quantize (bench/hf/run.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KILN="$ROOT/${BUILD_DIR:-build}/kiln"
BIN="${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp tree built with llama-perplexity}/build/bin"
TEXT="${TEXT:-/usr/share/games/fortunes/science}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
echo "| file | Kiln | llama.cpp | difference |"
echo "|---|---|---|---|"
for file in "$ROOT"/tests/hf/fixtures/gguf-archs/*.gguf; do
  arch="$(basename "$file" .gguf)"
  "$BIN/llama-quantize" "$file" "$WORK/$arch.gguf" F32 >/dev/null 2>&1 || cp "$file" "$WORK/$arch.gguf"
  kiln="$("$KILN" perplexity "gguf:$WORK/$arch.gguf" --file "$TEXT" --ctx 64 --chunks 3 --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["perplexity"])')"
  llama="$("$BIN/llama-perplexity" -m "$WORK/$arch.gguf" -f "$TEXT" -c 64 --chunks 3 -t 2 -fa off 2>&1 |
    sed -nE 's/.*Final estimate: PPL = ([0-9.]+).*/\1/p' || true)"
  if [ -z "$llama" ]; then
    echo "| $arch | $kiln | (llama.cpp does not load it) | |"
  else
    python3 -c "k, l = $kiln, $llama; print(f'| $arch | {k:.2f} | {l:.2f} | {abs(k - l) / l:.3%} |')"
  fi
done
