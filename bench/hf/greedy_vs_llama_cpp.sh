#!/usr/bin/env bash
# Greedy decoding of the same GGUF files in Kiln and in llama.cpp (built from PyPI's llama-cpp-python sdist:
# bench/hf/run.sh; its llama-simple and llama-quantize targets): the same first 32 tokens, for F32 and Q8_0.
# The model is a fortunes GPT trained by Kiln (RUN; trained here with the recipe's defaults when absent: a
# trained model, since random weights leave near-ties that llama.cpp's own builds split differently). Files:
# Kiln's F32 and Q8_0 exports and llama-quantize's Q8_0 of the F32 one. For each prompt (the first words of
# fortunes), `kiln sample --temperature 0` against llama-simple (greedy), 32 tokens each; a row per file:
# the prompts whose continuations are the same text.
#   BUILD_DIR=build LLAMA_CPP=DIR [RUN=DIR] [PROMPTS=12] bench/hf/greedy_vs_llama_cpp.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KILN="$ROOT/${BUILD_DIR:-build}/kiln"
BIN="${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp tree built with llama-simple and llama-quantize}/build/bin"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
RUN="${RUN:-$WORK/run}"
[ -d "$RUN" ] || "$KILN" train fortunes-gpt --out "$RUN" --no-progress >"$WORK/train.log"
"$KILN" export "$RUN" --format gguf --gguf-type f32 --out "$WORK/kiln-f32.gguf" >/dev/null
"$KILN" export "$RUN" --format gguf --gguf-type q8_0 --out "$WORK/kiln-q8_0.gguf" >/dev/null
"$BIN/llama-quantize" "$WORK/kiln-f32.gguf" "$WORK/llama-quantize-q8_0.gguf" Q8_0 >/dev/null 2>&1
# Prompts: the first three words of fortunes (science, computers, people), each once.
python3 - "${PROMPTS:-12}" >"$WORK/prompts" <<'PY'
import sys
n, prompts = int(sys.argv[1]), []
for name in ("science", "computers", "people"):
    for fortune in open(f"/usr/share/games/fortunes/{name}", encoding="utf-8", errors="replace").read().split("\n%\n"):
        words = fortune.split()
        if len(words) >= 3 and words[0][0].isalpha() and " ".join(words[:3]) not in prompts:
            prompts.append(" ".join(words[:3]))
        if len(prompts) >= n * (1 + ("science", "computers", "people").index(name)) // 3:
            break
print("\n".join(prompts[:n]))
PY
echo "| file | prompts whose first 32 greedy tokens are the same text in Kiln and llama.cpp |"
echo "|---|---|"
for file in kiln-f32 kiln-q8_0 llama-quantize-q8_0; do
  same=0 total=0 differing=""
  while IFS= read -r prompt; do
    "$KILN" sample "gguf:$WORK/$file.gguf" --prompt "$prompt" --temperature 0 --max-tokens 32 --count 1 \
      2>/dev/null | sed '$d' >"$WORK/kiln.txt"  # (less the samples' "---" line)
    "$BIN/llama-simple" -m "$WORK/$file.gguf" -n 32 "$prompt" 2>/dev/null >"$WORK/llama.txt"
    # llama-simple prints the prompt's tokens first, its BOS text included: compare from the prompt on.
    if python3 - "$WORK/kiln.txt" "$WORK/llama.txt" "$prompt" <<'PY'
import sys
kiln, llama, prompt = (open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3])
sys.exit(not (prompt in llama and llama[llama.index(prompt):].rstrip() == kiln.rstrip()))
PY
    then same=$((same + 1)); else differing="$differing \"$prompt\""; fi
    total=$((total + 1))
  done <"$WORK/prompts"
  echo "| $file | $same of $total${differing:+ (differ:$differing)} |"
done
