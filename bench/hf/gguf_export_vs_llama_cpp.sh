#!/usr/bin/env bash
# `kiln export --format gguf` read by llama.cpp: each fixture folder exported
# as F32 and Q8_0, then (1) llama-tokenize on the file against `kiln tokenize`
# on the folder, over a whole fortunes file, and (2) llama-perplexity against
# `kiln perplexity` on the same file (--ctx 64, 3 chunks).
#   BUILD_DIR=build LLAMA_CPP=DIR bench/hf/gguf_export_vs_llama_cpp.sh
# LLAMA_CPP: a llama.cpp source tree with build/bin/llama-perplexity and llama-tokenize (bench/hf/run.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KILN="$ROOT/${BUILD_DIR:-build}/kiln"
BIN="${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp tree built with llama-perplexity}/build/bin"
FIX="$ROOT/tests/hf/fixtures"
TEXT="${TEXT:-/usr/share/games/fortunes/science}"
CORPUS="${CORPUS:-/usr/share/games/fortunes/people}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
ppl_kiln() { "$KILN" perplexity "gguf:$1" --file "$TEXT" --ctx 64 --chunks 3 --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["perplexity"])'; }
ppl_llama() { "$BIN/llama-perplexity" -m "$1" -f "$TEXT" -c 64 --chunks 3 -t 2 -fa off 2>&1 |
  sed -nE 's/.*Final estimate: PPL = ([0-9.]+).*/\1/p'; }
echo "| folder (vocabulary) | tokens of $(basename "$CORPUS") | F32: Kiln / llama.cpp | Q8_0: Kiln / llama.cpp |"
echo "|---|---|---|---|"
for src in qwen2 qwen3 llama-gqa gguf-tiny llama-mqa-tied; do
  for type in f32 q8_0; do
    "$KILN" export "hf:$FIX/$src" --format gguf --gguf-type "$type" --out "$WORK/$src-$type.gguf" >/dev/null
  done
  "$BIN/llama-tokenize" -m "$WORK/$src-f32.gguf" -f "$CORPUS" --ids --log-disable 2>/dev/null | tail -1 >"$WORK/llama.ids"
  "$KILN" tokenize "hf:$FIX/$src" --file "$CORPUS" --json >"$WORK/kiln.json"
  tokens="$(python3 -c "
import ast, json
l, k = ast.literal_eval(open('$WORK/llama.ids').read()), json.load(open('$WORK/kiln.json'))['ids']
print(f'{len(k)}, identical' if l == k else f'{sum(a != b for a, b in zip(l, k))} of {len(k)} differ')")"
  row="| $src ($(python3 -c "import json; print(json.load(open('$FIX/$src/tokenizer.json'))['model'].get('byte_fallback') and 'SentencePiece-style' or 'byte-level')")) | $tokens"
  for type in f32 q8_0; do
    row="$row | $(python3 -c "k, l = $(ppl_kiln "$WORK/$src-$type.gguf"), $(ppl_llama "$WORK/$src-$type.gguf"); print(f'{k:.2f} / {l:.2f} ({abs(k - l) / l:.3%})')")"
  done
  echo "$row |"
done
