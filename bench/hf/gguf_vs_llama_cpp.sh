#!/usr/bin/env bash
# GGUF files in Kiln and in llama.cpp (built from PyPI's llama-cpp-python sdist: bench/hf/run.sh), two tables:
# 1. each architecture's fixture (tests/hf/fixtures/gguf-archs, tests/hf/make_gguf_arch_fixtures.py) scored by
#    `kiln perplexity` and llama-perplexity on the same text: the same chunked perplexity (--ctx 64, 3 chunks,
#    the second half of each scored). The F16 files are first widened to F32 by llama-quantize (the same values),
#    since llama.cpp rounds activations to F16 for F16 weights and Kiln's fp32 run does not;
# 2. `kiln export --format gguf` of fixture folders as F32 and Q8_0: llama-tokenize on the file against
#    `kiln tokenize` on the folder over a whole fortunes file, and the two perplexities on the file.
#   BUILD_DIR=build LLAMA_CPP=DIR bench/hf/gguf_vs_llama_cpp.sh
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
  sed -nE 's/.*Final estimate: PPL = ([0-9.]+).*/\1/p' || true; }
compare() {  # KILN LLAMA: "k / l (difference)"
  python3 -c "k, l = $1, $2; print(f'{k:.2f} / {l:.2f} ({abs(k - l) / l:.3%})')"
}

echo "| file | Kiln / llama.cpp |"
echo "|---|---|"
for file in "$FIX"/gguf-archs/*.gguf; do
  arch="$(basename "$file" .gguf)"
  "$BIN/llama-quantize" "$file" "$WORK/$arch.gguf" F32 >/dev/null 2>&1 || cp "$file" "$WORK/$arch.gguf"
  llama="$(ppl_llama "$WORK/$arch.gguf")"
  if [ -n "$llama" ]; then echo "| $arch | $(compare "$(ppl_kiln "$WORK/$arch.gguf")" "$llama") |"
  else echo "| $arch | llama.cpp does not load it |"; fi
done

echo
echo "| folder (vocabulary) | tokens of $(basename "$CORPUS") | F32: Kiln / llama.cpp | Q8_0: Kiln / llama.cpp |"
echo "|---|---|---|---|"
for src in qwen2 qwen3 llama-gqa gguf-tiny llama-mqa-tied rope-yarn; do
  for type in f32 q8_0; do
    "$KILN" export "hf:$FIX/$src" --format gguf --gguf-type "$type" --out "$WORK/$src-$type.gguf" >/dev/null
  done
  "$BIN/llama-tokenize" -m "$WORK/$src-f32.gguf" -f "$CORPUS" --ids --log-disable 2>/dev/null | tail -1 >"$WORK/llama.ids"
  "$KILN" tokenize "hf:$FIX/$src" --file "$CORPUS" --json >"$WORK/kiln.json"
  tokens="$(python3 -c "
import ast, json
l, k = ast.literal_eval(open('$WORK/llama.ids').read()), json.load(open('$WORK/kiln.json'))['ids']
print(f'{len(k)}, identical' if l == k else f'{sum(a != b for a, b in zip(l, k))} of {len(k)} differ')")"
  kind="$(python3 -c "import json; print('SentencePiece-style' if json.load(open('$FIX/$src/tokenizer.json'))['model'].get('byte_fallback') else 'byte-level')")"
  row="| $src ($kind) | $tokens"
  for type in f32 q8_0; do
    row="$row | $(compare "$(ppl_kiln "$WORK/$src-$type.gguf")" "$(ppl_llama "$WORK/$src-$type.gguf")")"
  done
  echo "$row |"
done
