#!/usr/bin/env bash
# kiln export --format hf: a trained fortunes-gpt run, a loaded Llama and a
# GGUF file come out as Hugging Face folders; --format gguf writes GGUF files. Kiln loads each back (hf:DIR) with the same
# log-probabilities as the source, and transformers' from_pretrained gives
# them too (the PyTorch 2 environment, bench/torch2_venv.sh: required).
source "$(dirname "$0")/lib.sh"
FIX="$(cd "$(dirname "$0")/../hf/fixtures" && pwd)"
require_oracle transformers gguf
TEXT="The best way to predict the future is to invent it."

run 0 "$KILN" train fortunes-gpt --steps 30 --n-layer 2 --n-embd 64 --n-head 4 --block-size 64 --no-progress \
  --out "$WORK/gpt"
run 0 "$KILN" export "$WORK/gpt" --format hf --out "$WORK/gpt-hf"
expect "wrote $WORK/gpt-hf"
run 1 "$KILN" export "$WORK/gpt" --format hf --out "$WORK/gpt-hf"
expect "exists and is not an empty folder"
run 0 "$KILN" export "hf:$FIX/llama-gqa" --format hf --out "$WORK/llama-hf"

# The same scores from the source and from the export, in Kiln.
same_scores() {  # SOURCE EXPORT
  run 0 "$KILN" score "$1" --text "$TEXT" --json
  cp "$OUT" "$WORK/source.json"
  run 0 "$KILN" score "hf:$2" --text "$TEXT" --json
  python3 - "$WORK/source.json" "$OUT" <<'PY' || fail "the export of $1 scores differently in Kiln"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["ids"] == b["ids"], (a["ids"], b["ids"])
sys.exit(0 if max(abs(x - y) for x, y in zip(a["logprobs"][1:], b["logprobs"][1:])) < 1e-5 else 1)
PY
  cp "$WORK/source.json" "$WORK/$(basename "$2").kiln.json"
}
same_scores "$WORK/gpt" "$WORK/gpt-hf"
# The same run as a GGUF file (llama.cpp's gpt2 architecture): Kiln reads it back with the run's ids and scores.
run 0 "$KILN" export "$WORK/gpt" --format gguf --gguf-type f32 --out "$WORK/gpt.gguf"
run 0 "$KILN" score "gguf:$WORK/gpt.gguf" --text "$TEXT" --json
cmp -s "$OUT" "$WORK/gpt-hf.kiln.json" || fail "the GGUF export of a fortunes-gpt run scores differently from the run"
# As Q8_0, its position embeddings stay F32, as llama-quantize keeps them (a table looked up, not multiplied).
run 0 "$KILN" export "$WORK/gpt" --format gguf --gguf-type q8_0 --out "$WORK/gpt-q8_0.gguf"
"$ORACLE_PY" -c 'import sys, gguf
types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(sys.argv[1]).tensors}
sys.exit(not (types["position_embd.weight"] == "F32" and types["token_embd.weight"] == "Q8_0"))' "$WORK/gpt-q8_0.gguf" ||
  fail "the Q8_0 export quantized the position embeddings (or not the token embeddings)"
# kiln eval of the export (each validation fortune on its own, with its
# tokenizer.json) and of the run (the token stream in windows): the same
# model on the same split, so bits per byte agree closely (measured: 1.6%).
bpb() { sed -nE 's/^validation: .* ([0-9.]+) bits per byte$/\1/p' "$OUT"; }
run 0 "$KILN" eval "$WORK/gpt"
run_bpb="$(bpb)"
run 0 "$KILN" eval "hf:$WORK/gpt-hf"
expect "fortunes, [0-9]+ tokens scored"
python3 -c "import sys; a, b = $run_bpb, $(bpb); sys.exit(0 if abs(a - b) / a < 0.05 else 1)" \
  || fail "kiln eval gives $(bpb) bits per byte for the export, $run_bpb for the run"
same_scores "hf:$FIX/llama-gqa" "$WORK/llama-hf"
# A GGUF file (llama.cpp's converter's F32 of tests/hf/fixtures/gguf-tiny) is the folder it exports: config.json
# from its metadata, tokenizer.json from its vocabulary, which transformers loads below with the same ids and scores.
GGUF="$FIX/gguf-tiny/model-f32.gguf"
run 0 "$KILN" export "gguf:$GGUF" --format hf --out "$WORK/gguf-hf"
same_scores "gguf:$GGUF" "$WORK/gguf-hf"
run 0 "$KILN" tokenize "gguf:$GGUF" --text "$TEXT" --json
python3 -c "import json, sys; sys.exit(json.load(open('$OUT'))['ids'] != json.load(open('$WORK/gguf-hf.kiln.json'))['ids'])" ||
  fail "kiln tokenize gguf:FILE gives other ids than kiln score"
run 0 "$KILN" sample "gguf:$GGUF" --prompt "$TEXT" --temperature 0 --max-tokens 16 --ignore-eos
cp "$OUT" "$WORK/gguf-sample.txt"
run 0 "$KILN" sample "hf:$WORK/gguf-hf" --prompt "$TEXT" --temperature 0 --max-tokens 16 --ignore-eos
cmp -s "$OUT" "$WORK/gguf-sample.txt" || fail "greedy samples of the GGUF file and of its export differ"
# llama-perplexity's chunked perplexity (measured against it in docs/PERFORMANCE.md): chunks of --ctx, each scored
# on its second half.
run 0 "$KILN" perplexity "gguf:$GGUF" --file /usr/share/games/fortunes/science --ctx 64 --chunks 3 --json
python3 -c "import json, sys; r = json.load(open('$OUT')); sys.exit(not (r['chunks'] == 3 and r['tokens_scored'] == 3 * 31 and 1 < r['perplexity'] < 1e4))" ||
  fail "kiln perplexity scored other than 3 chunks of 31 tokens"
run 1 "$KILN" perplexity "gguf:$GGUF" --text "$TEXT" --ctx 64
expect "needs at least 128"
# Its chat template (tokenizer.chat_template, set here by gguf-py's gguf-new-metadata) renders with the file's
# bos/eos text, as transformers rendered the template (tests/hf/fixtures/chat_templates/expected.json).
CORPUS="$FIX/chat_templates"
run 0 "$ORACLE_PY" -m gguf.scripts.gguf_new_metadata "$GGUF" "$WORK/chat.gguf" \
  --chat-template-file "$CORPUS/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja"
python3 - "$CORPUS/expected.json" "$WORK" <<'PY'
import json, sys
e, work = json.load(open(sys.argv[1])), sys.argv[2]
c = e["conversations"]["tool_round"]
json.dump({"messages": c["messages"], "tools": c["tools"]}, open(f"{work}/messages.json", "w"))
row = next(r for r in e["renders"] if r["template"] == "mistralai-Mistral-Nemo-Instruct-2407.jinja"
           and r["conversation"] == "tool_round" and not r["add_generation_prompt"])
open(f"{work}/want.txt", "w", encoding="utf-8").write(row["text"])
PY
"$KILN" apply-template "gguf:$WORK/chat.gguf" --messages "$WORK/messages.json" --no-generation-prompt \
  >"$WORK/got.txt" 2>"$OUT" || fail "apply-template of a GGUF file's template"
cmp -s "$WORK/got.txt" "$WORK/want.txt" || { diff "$WORK/want.txt" "$WORK/got.txt" >"$OUT"; fail "the GGUF file's template renders differently"; }
# kiln serve takes the file too, and its load line says where the model came from.
port="$(free_port)"
"$KILN" serve --model g="gguf:$WORK/chat.gguf" --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"g\", \"prompt\": \"$TEXT\", \"max_tokens\": 4, \"temperature\": 0, \"ignore_eos\": true}" >"$OUT" ||
  fail "POST /v1/completions to a GGUF model"
python3 -c "import json, sys; r = json.load(open('$OUT')); sys.exit(r['usage']['completion_tokens'] != 4)" ||
  fail "a GGUF model served other than 4 tokens: $(cat "$OUT")"
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"
grep -q "loaded g (gguf:llama, " "$WORK/serve.log" || { cp "$WORK/serve.log" "$OUT"; fail "the load line does not name the GGUF file's model"; }
# A model gguf-split wrote as three files samples from its first file as from the file it was split from.
run 0 "$KILN" sample "gguf:$FIX/gguf-tiny/model-q4_k_m.gguf" --prompt "$TEXT" --temperature 0 --max-tokens 8 --ignore-eos
cp "$OUT" "$WORK/whole-sample.txt"
run 0 "$KILN" sample "gguf:$FIX/gguf-tiny-split/model-q4_k_m-00001-of-00003.gguf" --prompt "$TEXT" --temperature 0 \
  --max-tokens 8 --ignore-eos
cmp -s "$OUT" "$WORK/whole-sample.txt" || fail "the split file samples otherwise than the whole one"
run 1 "$KILN" sample "gguf:$FIX/gguf-tiny-split/model-q4_k_m-00002-of-00003.gguf" --prompt "$TEXT"
expect "open its first, .*model-q4_k_m-00001-of-00003.gguf"
# LoRA on a quantized GGUF base (Q4_K_M: Q5_0, Q8_0 and F32 at this size) trains, samples, and exports merged in
# float, a folder Kiln (and transformers, below) loads.
run 0 "$KILN" data fortunes-sft --out "$WORK/sft-data"
head -n 32 "$WORK/sft-data/train.jsonl" > "$WORK/sft.jsonl"
run 0 "$KILN" train sft --init "gguf:$FIX/gguf-tiny/model-q4_k_m.gguf" --data "$WORK/sft.jsonl" --lora-rank 4 \
  --batch-size 8 --steps 2 --no-progress --out "$WORK/gguf-lora"
run 0 "$KILN" sample "$WORK/gguf-lora" --prompt "$TEXT" --max-tokens 4
run 0 "$KILN" export "$WORK/gguf-lora" --format hf --merge --out "$WORK/gguf-lora-hf"
run 0 "$KILN" score "hf:$WORK/gguf-lora-hf" --text "$TEXT" --json
cp "$OUT" "$WORK/gguf-lora-hf.kiln.json"

# kiln export --format gguf: the file llama.cpp's converter would write, with a byte-level (qwen2) and a
# SentencePiece-style (gguf-tiny) vocabulary: Kiln reads the F32 file back as its source (the same ids, the same
# log-probabilities), the Q8_0 one near it, and gguf-py (llama.cpp's own reader) reads both.
for src in qwen2 gguf-tiny; do
  run 0 "$KILN" export "hf:$FIX/$src" --format gguf --gguf-type f32 --out "$WORK/$src.gguf"
  expect "wrote $WORK/$src.gguf, f32"
  run 0 "$KILN" export "hf:$FIX/$src" --format gguf --gguf-type q8_0 --out "$WORK/$src-q8_0.gguf"
  for file in "$src" "$src-q8_0"; do
    run 0 "$KILN" score "gguf:$WORK/$file.gguf" --text "$TEXT" --json
    cp "$OUT" "$WORK/$file.gguf.json"
  done
  run 0 "$KILN" score "hf:$FIX/$src" --text "$TEXT" --json
  python3 - "$OUT" "$WORK/$src.gguf.json" "$WORK/$src-q8_0.gguf.json" <<'PY' || fail "the GGUF export of $src scores differently"
import json, sys
src, f32, q8 = (json.load(open(p)) for p in sys.argv[1:4])
assert src["ids"] == f32["ids"] == q8["ids"], (src["ids"], f32["ids"], q8["ids"])
diff = lambda a: max(abs(x - y) for x, y in zip(src["logprobs"][1:], a["logprobs"][1:]))
assert diff(f32) < 1e-5 and diff(q8) < 0.05, (diff(f32), diff(q8))
PY
  run 0 "$ORACLE_PY" - "$WORK/$src.gguf" "$WORK/$src-q8_0.gguf" <<'PY'
import sys, gguf
for path in sys.argv[1:]:
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    assert arch in ("llama", "qwen2"), arch
    assert r.fields["tokenizer.ggml.token_type"].types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]
    names = {t.name for t in r.tensors}
    assert {"token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"} <= names, names
    types = {t.name: t.tensor_type.name for t in r.tensors}
    assert types["blk.0.attn_norm.weight"] == "F32", types
    print(f"gguf-py reads {path}: {arch}, {len(names)} tensors, {set(types.values())}")
# Kiln's Q8_0 blocks are gguf-py's quantization (ggml's reference quantize_row_q8_0) of the F32 file's values.
f32 = {t.name: t for t in gguf.GGUFReader(sys.argv[1]).tensors}
checked = 0
for t in gguf.GGUFReader(sys.argv[2]).tensors:
    if t.tensor_type == gguf.GGMLQuantizationType.Q8_0:
        want = gguf.quants.quantize(f32[t.name].data.reshape(t.data.shape[0], -1), gguf.GGMLQuantizationType.Q8_0)
        assert want.tobytes() == t.data.tobytes(), t.name
        checked += 1
whole_blocks = [t for t in f32.values() if len(t.shape) == 2 and t.shape[0] % 32 == 0]  # (rows of 40 are F16)
assert (checked > 0) == bool(whole_blocks), (checked, len(whole_blocks))
print(f"Q8_0 as gguf-py quantizes it: {checked} tensors")
PY
  expect "Q8_0 as gguf-py quantizes it"
  expect "gguf-py reads"
done
run 1 "$KILN" export "hf:$FIX/qwen2" --format gguf --out "$WORK/qwen2.gguf"
expect "exists"
# A folder's two templates where transformers 5 saves them (chat_template.jinja, additional_chat_templates/
# tool_use.jinja) go into the GGUF file as llama.cpp's converter writes them (tokenizer.chat_template, .tool_use,
# tokenizer.chat_templates), and back into a folder; each renders a conversation with tools (through tool_use)
# and one without as the first folder does.
two="$WORK/two-templates"
cp -r "$FIX/qwen2" "$two"
cp "$CORPUS/templates/Qwen-Qwen2.5-7B-Instruct.jinja" "$two/chat_template.jinja"
mkdir "$two/additional_chat_templates"
cp "$CORPUS/templates/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja" "$two/additional_chat_templates/tool_use.jinja"
run 0 "$KILN" export "hf:$two" --format gguf --gguf-type f32 --out "$two.gguf"
run 0 "$ORACLE_PY" - "$two.gguf" "$two" <<'PY'
import sys, gguf
r, folder = gguf.GGUFReader(sys.argv[1]), sys.argv[2]
assert r.fields["tokenizer.chat_template"].contents() == open(f"{folder}/chat_template.jinja").read()
assert (r.fields["tokenizer.chat_template.tool_use"].contents() ==
        open(f"{folder}/additional_chat_templates/tool_use.jinja").read())
assert r.fields["tokenizer.chat_templates"].contents() == ["tool_use"], r.fields["tokenizer.chat_templates"].contents()
print("gguf-py reads both templates")
PY
expect "gguf-py reads both templates"
run 0 "$KILN" export "gguf:$two.gguf" --format hf --out "$two-back"
weather='[{"type": "function", "function": {"name": "get_weather", "description": "The weather.",
           "parameters": {"type": "object", "properties": {}}}}]'
for tools in "$weather" null; do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}], \"tools\": $tools}" >"$WORK/asked.json"
  "$KILN" apply-template "hf:$two" --messages "$WORK/asked.json" >"$WORK/want.txt" 2>"$OUT" || fail "apply-template hf:$two"
  [ "$tools" = null ] || grep -q "<tools>" "$WORK/want.txt" || fail "a conversation with tools did not render tool_use"
  for source in "gguf:$two.gguf" "hf:$two-back"; do
    "$KILN" apply-template "$source" --messages "$WORK/asked.json" >"$WORK/got.txt" 2>"$OUT" || fail "apply-template $source"
    cmp -s "$WORK/got.txt" "$WORK/want.txt" || fail "$source renders $tools otherwise than the folder"
  done
done
run 1 "$KILN" export "hf:$FIX/bert" --format gguf --out "$WORK/bert.gguf"
expect "Kiln writes the families it reads from GGUF"
run 0 "$KILN" export "hf:$FIX/mistral" --format gguf --out "$WORK/mistral.gguf"
expect "note: the model's sliding window \(8 tokens\)"
# A LoRA run on a GGUF base, merged, as a GGUF file again.
run 0 "$KILN" export "$WORK/gguf-lora" --format gguf --merge --gguf-type q8_0 --out "$WORK/gguf-lora.gguf"
run 0 "$KILN" sample "gguf:$WORK/gguf-lora.gguf" --prompt "$TEXT" --max-tokens 4

# One GGUF file per architecture (tests/hf/make_gguf_arch_fixtures.py): each exports as the folder transformers
# runs with Kiln's ids and scores (config from the metadata: RoPE scaling, soft caps, sliding layers, experts, ...).
# Each also writes back as GGUF (--format gguf): the file Kiln reads as the one llama.cpp's converter made, to the bit.
ARCHS=""
for file in "$FIX"/gguf-archs/*.gguf; do
  arch="$(basename "$file" .gguf)"
  run 0 "$KILN" export "gguf:$file" --format hf --out "$WORK/arch-$arch"
  run 0 "$KILN" score "hf:$WORK/arch-$arch" --precision fp32 --text "$TEXT" --json
  cp "$OUT" "$WORK/arch-$arch.kiln.json"
  ARCHS="$ARCHS arch-$arch"
  run 0 "$KILN" export "gguf:$file" --format gguf --gguf-type f32 --out "$WORK/arch-$arch.gguf"
  run 0 "$KILN" score "gguf:$WORK/arch-$arch.gguf" --precision fp32 --text "$TEXT" --json
  cp "$OUT" "$WORK/again.json"
  run 0 "$KILN" score "gguf:$file" --precision fp32 --text "$TEXT" --json
  cmp -s "$OUT" "$WORK/again.json" || fail "the GGUF export of $arch scores differently from its source"
done
# What llama.cpp's files fix and a folder can vary is refused by name (make_fixtures.py's Gemma 2 has a
# query_pre_attn_scalar apart from head_dim; its Qwen3-MoE a dense layer).
run 1 "$KILN" export "hf:$FIX/gemma2" --format gguf --out "$WORK/gemma2.gguf"
expect "query_pre_attn_scalar differs"
run 1 "$KILN" export "hf:$FIX/qwen3-moe" --format gguf --out "$WORK/qwen3-moe.gguf"
expect "layer 1 is dense"

# YaRN as llama.cpp's files state it (rope.scaling.* keys; a non-default attention factor as llama.cpp's multiplier
# of its own default, rope.scaling.attn_factor): the export scores as its folder, and gguf-py reads the keys.
# llama-perplexity agreed with Kiln on this file within 0.004% (docs/PERFORMANCE.md). gpt-oss's untruncated ramp
# is refused by name.
cp -r "$FIX/rope-yarn" "$WORK/yarn"
python3 - "$WORK/yarn/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_parameters"].update(attention_factor=1.3, beta_fast=16.0)
json.dump(c, open(sys.argv[1], "w"))
PY
run 0 "$KILN" export "hf:$WORK/yarn" --format gguf --gguf-type f32 --out "$WORK/yarn.gguf"
same_scores "gguf:$WORK/yarn.gguf" "$WORK/yarn"
run 0 "$ORACLE_PY" - "$WORK/yarn.gguf" <<'PY'
import math, sys, gguf
f = gguf.GGUFReader(sys.argv[1]).fields
value = lambda k: f[k].contents()
assert value("qwen2.rope.scaling.type") == "yarn" and value("qwen2.rope.scaling.factor") == 4.0
assert value("qwen2.rope.scaling.original_context_length") == 16 and value("qwen2.rope.scaling.yarn_beta_fast") == 16.0
assert abs(value("qwen2.rope.scaling.attn_factor") - 1.3 / (1 + 0.1 * math.log(4))) < 1e-6
print("gguf-py reads YaRN's keys")
PY
python3 - "$WORK/yarn/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_parameters"]["truncate"] = False
json.dump(c, open(sys.argv[1], "w"))
PY
run 1 "$KILN" export "hf:$WORK/yarn" --format gguf --gguf-type f32 --out "$WORK/yarn-untruncated.gguf"
expect "truncate: false"

# One Python for every folder: transformers' import is most of each check's time.
FOLDERS=(gpt-hf llama-hf gguf-hf gguf-lora-hf $ARCHS)
run 0 "$ORACLE_PY" - "$WORK" "$TEXT" "${FOLDERS[@]}" <<'PY'
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
work, text = sys.argv[1], sys.argv[2]
for name in sys.argv[3:]:
    folder, kiln = f"{work}/{name}", json.load(open(f"{work}/{name}.kiln.json"))
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(text, return_tensors="pt").input_ids
    assert ids[0].tolist() == kiln["ids"], (name, ids[0].tolist(), kiln["ids"])
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1).gather(1, ids[0, 1:, None])[:, 0]
    worst = max(abs(a - b) for a, b in zip(lp.tolist(), kiln["logprobs"][1:]))
    assert worst < 1e-4, (name, worst)
    print(f"transformers agrees: {folder}, largest difference {worst:.2e}")
PY
expect_lines "${#FOLDERS[@]}" "transformers agrees"
echo "ok"
