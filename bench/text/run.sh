#!/usr/bin/env bash
# Chat templates and tokenizers against transformers and tokenizers, one
# thread each, in one run: a 20-turn conversation rendered by real templates
# (tests/hf/fixtures/chat_templates), and every fortune of Debian's `fortunes`
# encoded by real vocabularies (the cli.hf_vocabs corpus).
#   BUILD_DIR=build bench/text/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${BUILD_DIR:-build}"
PY="$(bench/torch2_venv.sh)"
VOCABS="${KILN_VOCAB_CORPUS:-$HOME/.cache/kiln-vocabs}"
[ -d "$VOCABS/qwen2" ] || "$PY" tests/hf/make_vocab_fixtures.py "$(scripts/llama_cpp_source.sh)/models" "$VOCABS"
texts="$(mktemp)"
python3 -c "
import json
t = open('/usr/share/games/fortunes/fortunes', encoding='utf-8', errors='replace').read().split('\n%\n')
json.dump([s for s in t if s.strip()], open('$texts', 'w'))"
echo "# $(date -u +%FT%TZ)  $(lscpu | sed -n 's/^Model name: *//p'), one thread"
echo "| template, 20 turns | Kiln us | transformers us | speed-up |"
echo "|---|---|---|---|"
for t in meta-llama-Llama-3.1-8B-Instruct Qwen-Qwen2.5-7B-Instruct Qwen-Qwen3-0.6B HuggingFaceTB-SmolLM3-3B \
         mistralai-Mistral-Nemo-Instruct-2407 openai-gpt-oss-120b; do
  f="tests/hf/fixtures/chat_templates/templates/$t.jinja"
  k="$(OMP_NUM_THREADS=1 "$BUILD_DIR/kiln_text_bench" template "$f" 20 2000)"
  p="$("$PY" bench/text/peer.py template "$f" 20 200)"
  python3 -c "import json,sys; k,p=json.loads(sys.argv[2]),json.loads(sys.argv[3]); assert k['bytes']==p['bytes'],(k,p); print('| %s | %.0f | %.0f | %.1fx |' % (sys.argv[1], k['render_us'], p['render_us'], p['render_us']/k['render_us']))" "$t" "$k" "$p"
done
echo
echo "| vocabulary, fortunes | Kiln tokens/s | tokenizers encode() | ratio | tokenizers encode_batch() | ratio |"
echo "|---|---|---|---|---|---|"
for v in gpt-2 llama-bpe qwen2-nfc llama-spm phi-3; do
  k="$(OMP_NUM_THREADS=1 "$BUILD_DIR/kiln_text_bench" tokenize "$VOCABS/$v/tokenizer.json" "$texts" 5)"
  p="$(RAYON_NUM_THREADS=1 "$PY" bench/text/peer.py tokenize "$VOCABS/$v/tokenizer.json" "$texts" 5)"
  python3 -c "import json,sys; k,p=json.loads(sys.argv[2]),json.loads(sys.argv[3]); print('| %s | %.2fM | %.2fM | %.2fx | %.2fM | %.2fx |' % (sys.argv[1], k['tokens_per_s']/1e6, p['tokens_per_s']/1e6, k['tokens_per_s']/p['tokens_per_s'], p['batch_tokens_per_s']/1e6, k['tokens_per_s']/p['batch_tokens_per_s']))" "$v" "$k" "$p"
done
rm -f "$texts"
