#!/usr/bin/env bash
# Greedy decoding of the same GGUF files in Kiln and in llama.cpp (built from PyPI's llama-cpp-python sdist:
# bench/hf/run.sh; its llama-simple and llama-quantize targets): the same first 32 tokens, for F32 and Q8_0.
# The model is a fortunes GPT trained by Kiln (RUN; trained here with the recipe's defaults when absent: a
# trained model, since random weights leave near-ties that llama.cpp's own builds split differently). Files:
# Kiln's F32 and Q8_0 exports and llama-quantize's Q8_0 of the F32 one. For each prompt (the first words of
# fortunes), `kiln sample --temperature 0` against llama-simple (greedy), 32 tokens each; a row per file:
# the prompts whose continuations are the same text. Where the build has llama-completion, llama.cpp against
# itself too: llama-simple against llama-completion without flash attention, with f16 and with f32 keys and
# values (how far its own settings move near-ties), and Kiln against the last.
#   BUILD_DIR=build LLAMA_CPP=DIR [LLAMA_BUILD=build] [RUN=DIR] [PROMPTS=12] bench/hf/greedy_vs_llama_cpp.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KILN="$ROOT/${BUILD_DIR:-build}/kiln"
BIN="${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp tree built with llama-simple and llama-quantize}/${LLAMA_BUILD:-build}/bin"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
RUN="${RUN:-$WORK/run}"
[ -d "$RUN" ] || "$KILN" train fortunes-gpt --out "$RUN" --no-progress >"$WORK/train.log"
"$KILN" export "$RUN" --format gguf --gguf-type f32 --out "$WORK/kiln-f32.gguf" >/dev/null
"$KILN" export "$RUN" --format gguf --gguf-type q8_0 --out "$WORK/kiln-q8_0.gguf" >/dev/null
"$LLAMA_CPP/build/bin/llama-quantize" "$WORK/kiln-f32.gguf" "$WORK/llama-quantize-q8_0.gguf" Q8_0 >/dev/null 2>&1
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
# Each run's text from the prompt on (llama-simple prints its BOS text first, llama-completion ends with a note).
runs="kiln llama-simple"
[ -x "$BIN/llama-completion" ] && runs="$runs f16-kv f32-kv"
# llama-completion's text, the longest of three runs: its log thread now and then drops the end of the
# output at exit (one run in ten or so here).
completion() {  # FILE PROMPT ARGS...
  local file="$1" prompt="$2" longest="" text
  shift 2
  for _ in 1 2 3; do
    text="$("$BIN/llama-completion" -m "$file" -p "$prompt" -n 32 --temp 0 -no-cnv -fa off "$@" </dev/null 2>/dev/null)"
    [ ${#text} -gt ${#longest} ] && longest="$text"
  done
  printf '%s\n' "$longest"
}
run() {  # RUN FILE PROMPT
  case "$1" in
    kiln) "$KILN" sample "gguf:$2" --prompt "$3" --temperature 0 --max-tokens 32 --count 1 2>/dev/null | sed '$d' ;;
    llama-simple) "$BIN/llama-simple" -m "$2" -n 32 "$3" 2>/dev/null ;;
    f16-kv) completion "$2" "$3" ;;
    f32-kv) completion "$2" "$3" -ctk f32 -ctv f32 ;;
  esac | python3 -c 'import sys; t = sys.stdin.read().replace(" [end of text]", ""); p = sys.argv[1]
print(t[t.index(p):].rstrip() if p in t else t.rstrip())' "$3"
}
echo "| file | Kiln = llama-simple |${runs#kiln llama-simple}" | sed 's/ f16-kv/ llama-simple = llama-completion -fa off |/; s/ f32-kv/ llama-simple = the same with f32 keys and values | Kiln = the same |/'
echo "|---|---|${runs#kiln llama-simple}" | sed 's/ f16-kv/---|/; s/ f32-kv/---|---|/'
for file in kiln-f32 kiln-q8_0 llama-quantize-q8_0; do
  i=0
  while IFS= read -r prompt; do
    i=$((i + 1))
    for r in $runs; do run "$r" "$WORK/$file.gguf" "$prompt" >"$WORK/$i.$r"; done
  done <"$WORK/prompts"
  python3 - "$WORK" "$i" "$file" $runs <<'PY'
import sys
work, n, file, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
prompts = open(f"{work}/prompts").read().split("\n")
def same(a, b):  # how many prompts' texts agree, and the prompts that part
    parted = [prompts[i - 1] for i in range(1, n + 1)
              if open(f"{work}/{i}.{a}").read() != open(f"{work}/{i}.{b}").read()]
    return f"{n - len(parted)} of {n}" + (" (differ: " + ", ".join(f'"{p}"' for p in parted) + ")" if parted else "")
pairs = [("kiln", "llama-simple")]
if "f16-kv" in runs:
    pairs += [("llama-simple", "f16-kv"), ("llama-simple", "f32-kv"), ("kiln", "f32-kv")]
print(f"| {file} | " + " | ".join(same(a, b) for a, b in pairs) + " |")
PY
done
