#!/usr/bin/env bash
# Sentence embeddings through the kiln command and kiln serve, against what
# sentence-transformers' encode() answered on the fixture folders
# (tests/hf/make_fixtures.py): kiln embed, POST /v1/embeddings as floats and
# as base64, and the official openai client's embeddings.create (the PyTorch 2
# environment's, bench/torch2_venv.sh: required); bad input is a clear error.
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
FIX="$ROOT/tests/hf/fixtures"
require_oracle openai transformers gguf huggingface_hub

# same_ids FILE FIXTURE I...: `kiln tokenize gguf:FILE` of the fixture's texts I gives its folder's ids.
same_ids() {
  local file="$1" fixture="$2" i text
  shift 2
  for i in "$@"; do
    text="$(python3 -c "import json; print(json.load(open('$FIX/$fixture/expected.json'))['texts'][$i])")"
    run 0 "$KILN" tokenize "gguf:$file" --json --text "$text"
    python3 -c "import json, sys; sys.exit(0 if json.loads(open('$OUT').read().splitlines()[-1])['ids'] == json.load(open('$FIX/$fixture/expected.json'))['ids'][$i] else 1)" ||
      fail "$file: text $i's ids differ from $fixture's tokenizer's"
  done
}

for model in embed-minilm embed-roberta-cls embed-nomic-bert; do
  python3 -c "import json; print('\n'.join(json.load(open('$FIX/$model/expected.json'))['texts']))" >"$WORK/texts"
  # (the empty text is a line of its own, and embeds as [CLS] [SEP] alone)
  run 0 "$KILN" embed "hf:$FIX/$model" --file "$WORK/texts" --json
  python3 - "$OUT" "$FIX/$model/expected.json" <<'PY' || fail "$model: kiln embed differs from sentence-transformers"
import json, sys
got, want = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert got["dimensions"] == len(want["embeddings"][0]) and len(got["embeddings"]) == len(want["embeddings"]), got
sys.exit(0 if max(abs(a - b) for g, w in zip(got["embeddings"], want["embeddings"]) for a, b in zip(g, w)) < 1e-5 else 1)
PY
done
# GGUF: the MiniLM folder as llama.cpp's converter writes it (F32 and Q8_0; its WordPiece vocabulary in llama.cpp's
# spelling, its pooling as bert.pooling_type), read back and normalised as llama-server's embeddings are: the same
# ids and embeddings as sentence-transformers' on the folder. (A GGUF file keeps no max_seq_length: the texts within
# the folder's 16 tokens are compared.)
SRC="$(made_once "$ROOT/scripts/llama_cpp_source.sh")" || fail "could not get llama.cpp's sources"
for type in f32 q8_0; do
  run 0 "$ORACLE_PY" "$ROOT/tests/hf/convert_fixture_to_gguf.py" "$SRC" bert-bge "$FIX/embed-minilm" --outtype "$type" \
    --outfile "$WORK/minilm-$type.gguf"
  python3 -c "import json; print('\n'.join(json.load(open('$FIX/embed-minilm/expected.json'))['texts'][:4]))" >"$WORK/short"
  run 0 "$KILN" embed "gguf:$WORK/minilm-$type.gguf" --file "$WORK/short" --json
  python3 - "$OUT" "$FIX/embed-minilm/expected.json" "$type" <<'PY' || fail "GGUF $type: kiln embed differs from sentence-transformers"
import json, sys
got, want, kind = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
worst = max(abs(a - b) for g, w in zip(got["embeddings"], want["embeddings"][:4]) for a, b in zip(g, w))
print(kind, "largest difference", worst)
sys.exit(0 if len(got["embeddings"]) == 4 and worst < (1e-5 if kind == "f32" else 2e-3) else 1)
PY
done
# nomic-embed-text: the folder as the hub has it (its modeling code's config keys, n_embd, ..., beside
# transformers', as llama.cpp's converter reads them through transformers), and llama.cpp's nomic-bert GGUF of it
# (fused Wqkv, SwiGLU, rotary positions): transformers' embeddings (normalised, as llama-server's are). Q8_0 is
# 1.3e-2 off here, and llama.cpp's own llama-embedding on the same file 1.1e-2 (random weights, 32 wide).
HUB="$WORK/nomic-hub"
linked_copy "$FIX/embed-nomic-bert" "$HUB" config.json
python3 - "$FIX/embed-nomic-bert/config.json" "$HUB/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update({"n_embd": c["hidden_size"], "n_layer": c["num_hidden_layers"], "n_head": c["num_attention_heads"],
          "n_inner": c["intermediate_size"], "n_positions": 8192, "max_trained_positions": 2048,
          "activation_function": "swiglu", "causal": False, "prenorm": False, "qkv_proj_bias": False,
          "mlp_fc1_bias": False, "mlp_fc2_bias": False, "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0,
          "rotary_emb_interleaved": False, "rotary_emb_scale_base": None, "layer_norm_epsilon": 1e-12})
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
python3 -c "import json; print('\n'.join(json.load(open('$FIX/embed-nomic-bert/expected.json'))['texts']))" >"$WORK/texts"
run 0 "$KILN" embed "hf:$HUB" --file "$WORK/texts" --json
cp "$OUT" "$WORK/hub.json"
for type in f32 q8_0; do
  run 0 "$ORACLE_PY" "$ROOT/tests/hf/convert_fixture_to_gguf.py" "$SRC" bert-bge "$HUB" --outtype "$type" \
    --outfile "$WORK/nomic-$type.gguf"
  run 0 "$KILN" embed "gguf:$WORK/nomic-$type.gguf" --file "$WORK/texts" --json
  python3 - "$OUT" "$WORK/hub.json" "$FIX/embed-nomic-bert/expected.json" "$type" <<'PY' || fail "nomic-bert $type differs from transformers"
import json, math, sys
got, hub, want = (json.load(open(p)) for p in sys.argv[1:4])
kind = sys.argv[4]
norm = lambda v: [x / math.sqrt(sum(y * y for y in v)) for x in v]
worst = lambda rows, scale: max(abs(a - b) for g, w in zip(rows, want["embeddings"]) for a, b in zip(g, scale(w)))
print("hub folder", worst(hub["embeddings"], list), kind, worst(got["embeddings"], norm))
sys.exit(0 if len(got["embeddings"]) == 5 and worst(hub["embeddings"], list) < 1e-5 and
         worst(got["embeddings"], norm) < (1e-5 if kind == "f32" else 3e-2) else 1)
PY
done

# XLM-RoBERTa with a SentencePiece Unigram vocabulary (bge-m3's and multilingual-e5's kind), shipped with its
# sentencepiece.bpe.model as the hub's are: llama.cpp's converter writes a bert file with a "t5" vocabulary and the
# positions RoBERTa skips cut off; its ids and [CLS] embeddings are sentence-transformers'.
python3 -c "import json; print('\n'.join(json.load(open('$FIX/embed-xlmr-cls/expected.json'))['texts']))" >"$WORK/texts"
for type in f32 q8_0; do
  run 0 "$ORACLE_PY" "$ROOT/tests/hf/convert_fixture_to_gguf.py" "$SRC" default "$FIX/embed-xlmr-cls" --outtype "$type" \
    --outfile "$WORK/xlmr-$type.gguf"
  run 0 "$KILN" embed "gguf:$WORK/xlmr-$type.gguf" --file "$WORK/texts" --json
  python3 - "$OUT" "$FIX/embed-xlmr-cls/expected.json" "$type" <<'PY' || fail "XLM-R GGUF $type differs from sentence-transformers"
import json, sys
got, want, kind = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
worst = max(abs(a - b) for g, w in zip(got["embeddings"], want["embeddings"]) for a, b in zip(g, w))
print(kind, "largest difference", worst)
sys.exit(0 if len(got["embeddings"]) == 5 and worst < (1e-5 if kind == "f32" else 2e-2) else 1)
PY
done
same_ids "$WORK/xlmr-f32.gguf" embed-xlmr-cls 0 2 4
# A reranker as llama.cpp's converter writes bge-reranker-v2-m3 (XLM-RoBERTa, a Unigram vocabulary, the head as "cls"
# and "cls.output"), served below: its pairs joined as llama-server joins them (<s> q </s></s> d </s>, here
# transformers' too) score as CrossEncoder does. A BERT cross-encoder's file, whose pooler the converter drops, is
# refused: it no longer scores as its model does.
for type in f32 q8_0; do
  run 0 "$ORACLE_PY" "$ROOT/tests/hf/convert_fixture_to_gguf.py" "$SRC" default "$FIX/rerank-xlmr" --outtype "$type" \
    --outfile "$WORK/rerank-xlmr-$type.gguf"
done
run 0 "$ORACLE_PY" "$ROOT/tests/hf/convert_fixture_to_gguf.py" "$SRC" bert-bge "$FIX/rerank-minilm" --outtype f32 \
  --outfile "$WORK/rerank-minilm.gguf"
run 1 "$KILN" classify "gguf:$WORK/rerank-minilm.gguf" --text "x"
expect "drops BERT's pooler"
# Qwen3-Reranker's kind as llama.cpp's converter writes it (rank pooling, its output's "yes" and "no" rows as
# cls.output, its prompt as tokenizer.chat_template.rerank): each pair in that prompt, the last token's "yes" against
# "no", as its model card scores it with transformers (and llama-server runs it: no bos added); its folder too (its
# README names it, as the converter reads it).
run 0 "$ORACLE_PY" "$ROOT/tests/hf/convert_fixture_to_gguf.py" "$SRC" llama-bpe "$FIX/rerank-qwen3" --outtype f32 \
  --outfile "$WORK/rerank-qwen3.gguf"

same_ids "$WORK/minilm-f32.gguf" embed-minilm 0 1 2

run 0 "$KILN" embed "hf:$FIX/embed-minilm" --text "one" --text "two"
[ "$(wc -l <"$OUT")" = 2 ] || fail "two texts did not give two lines"
run 1 "$KILN" embed "hf:$FIX/llama-gqa" --text "x"
expect "is not an encoder Kiln embeds with"
run 1 "$KILN" embed "$FIX/embed-minilm" --text "x"
expect "kiln embed takes hf:DIR"
run 1 "$KILN" embed "gguf:$FIX/gguf-archs/qwen2.gguf" --text "x"
expect "is not an encoder Kiln embeds with"

# A decoder embedder (Qwen3-Embedding's kind: a Qwen3 body, its last token pooled): the folder as transformers
# saves it (Qwen3Model), the same folder saying Qwen3ForCausalLM as Qwen3-Embedding's does (its modules.json makes it an
# embedder), and llama.cpp's qwen3 GGUF of it (its pooling_type names the last token): sentence-transformers'.
QWEN3="$WORK/qwen3-causal"
linked_copy "$FIX/embed-qwen3-last" "$QWEN3" config.json
python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c['architectures'] = ['Qwen3ForCausalLM']; json.dump(c, open(sys.argv[2], 'w'))" \
  "$FIX/embed-qwen3-last/config.json" "$QWEN3/config.json"
for type in f32 q8_0; do
  run 0 "$ORACLE_PY" "$ROOT/tests/hf/convert_fixture_to_gguf.py" "$SRC" llama-bpe "$FIX/embed-qwen3-last" --outtype "$type" \
    --outfile "$WORK/qwen3-embed-$type.gguf"
done
python3 -c "import json; print('\n'.join(json.load(open('$FIX/embed-qwen3-last/expected.json'))['texts']))" >"$WORK/texts"
# (Q8_0: its int8 products, 1.7e-2 off on this 32-wide random model)
for spec in "hf:$FIX/embed-qwen3-last:1e-5" "hf:$QWEN3:1e-5" "gguf:$WORK/qwen3-embed-f32.gguf:1e-5" \
            "gguf:$WORK/qwen3-embed-q8_0.gguf:5e-2"; do
  run 0 "$KILN" embed "${spec%:*}" --file "$WORK/texts" --json
  python3 - "$OUT" "$FIX/embed-qwen3-last/expected.json" "${spec##*:}" <<'PY' || fail "$spec: the decoder embedder differs from sentence-transformers"
import json, sys
got, want, bound = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
sys.exit(0 if len(got["embeddings"]) == 5 and max(abs(a - b) for g, w in zip(got["embeddings"], want["embeddings"])
                                                   for a, b in zip(g, w)) < bound else 1)
PY
done

# EmbeddingGemma's kind (Gemma 3's body attending both ways, mean-pooled, two Dense projections, normalised): the
# folder, and llama.cpp's gemma-embedding GGUF of it with its Dense modules (--sentence-transformers-dense-modules:
# dense_2, dense_3), give sentence-transformers' embeddings; --prompt-name puts the folder's prompt first, as
# encode(prompt_name=...). (llama-server --embeddings on the F32 file agrees within 2.2e-4, by hand.) Being an
# encoder, it does not generate.
for type in f32 q8_0; do
  run 0 "$ORACLE_PY" "$ROOT/tests/hf/convert_fixture_to_gguf.py" "$SRC" llama-bpe "$FIX/embed-gemma3" --outtype "$type" \
    --outfile "$WORK/gemma-embed-$type.gguf" --sentence-transformers-dense-modules
done
same_ids "$WORK/gemma-embed-f32.gguf" embed-gemma3 0 2 4
python3 -c "import json; print('\n'.join(json.load(open('$FIX/embed-gemma3/expected.json'))['texts']))" >"$WORK/texts"
# (Q8_0: its int8 products, 8.7e-3 off on this 32-wide random model)
for spec in "hf:$FIX/embed-gemma3:1e-5" "gguf:$WORK/gemma-embed-f32.gguf:1e-5" "gguf:$WORK/gemma-embed-q8_0.gguf:5e-2" \
            "hf:$FIX/embed-gemma3:1e-5:document"; do
  model="${spec%%:[0-9]*}" rest="${spec#"$model":}"
  if [[ "$rest" == *:* ]]; then
    run 0 "$KILN" embed "$model" --file "$WORK/texts" --json --prompt-name "${rest#*:}"
  else
    run 0 "$KILN" embed "$model" --file "$WORK/texts" --json
  fi
  python3 - "$OUT" "$FIX/embed-gemma3/expected.json" "$rest" <<'PY' || fail "$spec: EmbeddingGemma's kind differs from sentence-transformers"
import json, sys
got, want, (bound, *prompt) = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3].split(":")
if prompt:
    assert want["prompted"]["prompt_name"] == prompt[0]
embeddings = want["prompted"]["embeddings"] if prompt else want["embeddings"]
worst = max(abs(a - b) for g, w in zip(got["embeddings"], embeddings) for a, b in zip(g, w))
print(sys.argv[3], "largest difference", worst)
sys.exit(0 if got["dimensions"] == 32 and len(got["embeddings"]) == 5 and worst < float(bound) else 1)
PY
done
run 1 "$KILN" embed "hf:$FIX/embed-gemma3" --text "x" --prompt-name nothing
expect 'has no prompt named "nothing" .it has document, query.'
run 1 "$KILN" sample "hf:$FIX/embed-gemma3" --prompt "x"
expect "holds an embedder"
run 1 "$KILN" sample "gguf:$WORK/gemma-embed-f32.gguf" --prompt "x"
expect "attends both ways .* does not generate"

port="$(free_port)"
"$KILN" serve --model emb="hf:$FIX/embed-minilm" --model lm="hf:$FIX/llama-gqa" --max-batch 2 --port "$port" \
  --model gguf="gguf:$WORK/minilm-f32.gguf" --model q3="hf:$QWEN3" --model q3gguf="gguf:$WORK/qwen3-embed-f32.gguf" \
  --model rr="hf:$FIX/rerank-minilm" --model cls="hf:$FIX/bert" \
  --model rrx="gguf:$WORK/rerank-xlmr-f32.gguf" --model rrq="gguf:$WORK/rerank-xlmr-q8_0.gguf" \
  --model rr3="gguf:$WORK/rerank-qwen3.gguf" --model rr3hf="hf:$FIX/rerank-qwen3" \
  --model eg="hf:$FIX/embed-gemma3" --model eggguf="gguf:$WORK/gemma-embed-f32.gguf" \
  --model dense="hf:$FIX/embed-minilm-dense" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
run 0 python3 - "$port" "$FIX/embed-minilm/expected.json" <<'PY'
import base64, json, struct, sys, urllib.error, urllib.request
port, want = sys.argv[1], json.load(open(sys.argv[2]))
def post(body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", json.dumps(body).encode())
    try:
        return 200, json.loads(urllib.request.urlopen(req).read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
def close(got, w):
    return max(abs(a - b) for a, b in zip(got, w)) < 1e-5
# More texts than --max-batch: they go through the batcher in parts, in order.
status, r = post({"model": "emb", "input": want["texts"]})
assert status == 200 and r["object"] == "list" and r["model"] == "emb", r
assert [d["index"] for d in r["data"]] == list(range(len(want["texts"]))), r
assert all(close(d["embedding"], w) for d, w in zip(r["data"], want["embeddings"])), r
assert r["usage"]["prompt_tokens"] == sum(len(i) for i in want["ids"]) == r["usage"]["total_tokens"], r["usage"]
# Shortened (Matryoshka): the first values, normalised again, as OpenAI and Ollama give them
status, r = post({"model": "emb", "input": want["texts"][:2], "dimensions": 12})
for d, w in zip(r["data"], want["embeddings"]):
    norm = sum(x * x for x in w[:12]) ** 0.5
    assert status == 200 and len(d["embedding"]) == 12 and close(d["embedding"], [x / norm for x in w[:12]]), r
status, r = post({"model": "emb", "input": want["texts"][0], "encoding_format": "base64", "dimensions": 36})
raw = base64.b64decode(r["data"][0]["embedding"])
assert close(struct.unpack(f"<{len(raw) // 4}f", raw), want["embeddings"][0]), r
status, r = post({"model": "gguf", "input": want["texts"][:4]})  # the same model as llama.cpp's GGUF file
assert status == 200 and all(close(d["embedding"], w) for d, w in zip(r["data"], want["embeddings"])), r
q3 = json.load(open(sys.argv[2].replace("embed-minilm", "embed-qwen3-last")))
eg = json.load(open(sys.argv[2].replace("embed-minilm", "embed-gemma3")))
for name, w in (("q3", q3), ("q3gguf", q3), ("eg", eg), ("eggguf", eg)):  # decoder embedders: not language models
    status, r = post({"model": name, "input": w["texts"]})
    assert status == 200 and all(close(d["embedding"], e) for d, e in zip(r["data"], w["embeddings"])), (name, r)
    assert r["usage"]["prompt_tokens"] == sum(len(i) for i in w["ids"]), (name, r["usage"])
for body, says in (({"model": "lm", "input": "x"}, "not a text embedder"),
                   ({"model": "emb", "input": "x", "dimensions": 37}, "'dimensions' is 37"),
                   ({"model": "emb", "input": "x", "dimensions": 0}, "'dimensions' is 0"),
                   ({"model": "emb", "input": [5, 6]}, "token ids"),
                   ({"model": "emb", "input": "x", "encoding_format": "fp16"}, "encoding_format")):
    status, r = post(body)
    assert status == 400 and says in r["error"]["message"], (body, status, r)
print("embeddings served ok")
PY
# Hugging Face TEI's /embed and llama-server's /embedding on the same models: sentence-transformers' embeddings,
# normalised as each server does (TEI's normalize, true by default; llama.cpp's embd_normalize, 2 by default: a model
# without sentence-transformers' Normalize shows it), TEI's prompt_name as encode(prompt_name=...), and a text past
# max_seq_length (MiniLM's fifth: 16 tokens) an error unless truncate asks for it cut.
run 0 python3 - "$port" "$FIX" <<'PY'
import json, sys, urllib.error, urllib.request
port, fix = sys.argv[1], sys.argv[2]
want = {name: json.load(open(f"{fix}/{name}/expected.json")) for name in ("embed-minilm", "embed-minilm-dense", "embed-gemma3")}
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode())
    try:
        return 200, json.loads(urllib.request.urlopen(req).read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
def close(got, w):  # (relative to the vector's largest value: embd_normalize 0 scales it to an int16's range)
    return len(got) == len(w) and max(abs(a - b) for a, b in zip(got, w)) < 1e-5 * max(1, *map(abs, w))
def scaled(v, p):
    size = max(abs(x) for x in v) / 32760 if p == 0 else sum(abs(x) ** p for x in v) ** (1 / p) if p > 0 else 1
    return [x / size for x in v]
minilm, dense, gemma = want["embed-minilm"], want["embed-minilm-dense"], want["embed-gemma3"]
status, r = post("/embed", {"model": "emb", "inputs": minilm["texts"][:4]})
assert status == 200 and len(r) == 4 and all(close(g, w) for g, w in zip(r, minilm["embeddings"])), (status, r)
status, r = post("/embed", {"model": "emb", "inputs": minilm["texts"][4]})  # TEI's truncate is false by default
assert status == 413 and "16" in r["error"]["message"] and "truncate" in r["error"]["message"], (status, r)
status, r = post("/embed", {"model": "emb", "inputs": minilm["texts"][4], "truncate": True})
assert status == 200 and close(r[0], minilm["embeddings"][4]), (status, r)
for normalize, p in ((None, 2), (True, 2), (False, -1)):
    body = {"model": "dense", "inputs": dense["texts"]} | ({} if normalize is None else {"normalize": normalize})
    status, r = post("/embed", body)
    assert status == 200 and all(close(g, scaled(w, p)) for g, w in zip(r, dense["embeddings"])), (normalize, r)
status, r = post("/embed", {"model": "eg", "inputs": gemma["texts"], "prompt_name": gemma["prompted"]["prompt_name"]})
assert status == 200 and all(close(g, w) for g, w in zip(r, gemma["prompted"]["embeddings"])), r
status, r = post("/embed", {"model": "eg", "inputs": "x", "prompt_name": "nothing"})
assert status == 400 and 'no prompt named "nothing"' in r["error"]["message"], r
status, r = post("/embed", {"model": "dense", "inputs": "x", "dimensions": 8, "normalize": False})  # TEI: cut, as is
status2, whole = post("/embed", {"model": "dense", "inputs": "x", "normalize": False})
assert status == status2 == 200 and r[0] == whole[0][:8], (r, whole)
status, r = post("/embed", {"inputs": "x"})
assert status == 400 and "name the model" in r["error"]["message"], r
for p in (None, 2, -1, 0, 3):
    body = {"model": "dense", "content": dense["texts"]} | ({} if p is None else {"embd_normalize": p})
    for path in ("/embedding", "/embeddings"):
        status, r = post(path, body)
        assert status == 200 and [e["index"] for e in r] == list(range(5)), (path, p, r)
        assert all(len(e["embedding"]) == 1 and close(e["embedding"][0], scaled(w, 2 if p is None else p))
                   for e, w in zip(r, dense["embeddings"])), (path, p, r)
status, r = post("/embedding", {"model": "emb", "input": minilm["texts"][4]})  # llama-server cuts at the model's end
assert status == 200 and close(r[0]["embedding"][0], minilm["embeddings"][4]), r
print("TEI and llama-server embeddings ok")
PY
# huggingface_hub's InferenceClient on an endpoint serving one model (as TEI serves one), which posts to its root:
# feature_extraction (TEI's fields) gets sentence-transformers' embeddings, with a prompt too; text_classification
# the classifier's labels by probability.
one="$(free_port)"
for served in "eg=hf:$FIX/embed-gemma3" "cls=hf:$FIX/bert"; do
  "$KILN" serve --model "$served" --port "$one" >"$WORK/serve-one.log" 2>&1 &
  alone=$!
  LOG="$WORK/serve-one.log" wait_for_server "$one" "$alone"
  run 0 "$ORACLE_PY" - "$one" "$FIX" "${served%%=*}" <<'PY'
import json, sys
from huggingface_hub import InferenceClient
port, fix, name = sys.argv[1:4]
client = InferenceClient(model=f"http://127.0.0.1:{port}")
if name == "eg":
    want = json.load(open(f"{fix}/embed-gemma3/expected.json"))
    got = client.feature_extraction(want["texts"][0])
    assert abs(got[0] - want["embeddings"][0]).max() < 1e-5, got
    got = client.feature_extraction(want["texts"][1], prompt_name=want["prompted"]["prompt_name"], normalize=True)
    assert abs(got[0] - want["prompted"]["embeddings"][1]).max() < 1e-5, got
    print("InferenceClient.feature_extraction: sentence-transformers' embeddings, with a prompt too")
else:
    want = json.load(open(f"{fix}/bert/expected.json"))
    for t in want["texts"][:3]:
        got = client.text_classification(t["text"])
        best = sorted(zip(t["probs"], want["labels"]), key=lambda x: -x[0])
        assert [g.label for g in got] == [l for _, l in best], (got, best)
        assert all(abs(g.score - p) < 1e-5 for g, (p, _) in zip(got, best)), (got, best)
    assert len(client.text_classification(want["texts"][0]["text"], top_k=2)) == 2
    print("InferenceClient.text_classification: the classifier's probabilities, best first")
PY
  kill -TERM "$alone"
  wait "$alone" || fail "the server of $served alone did not exit cleanly"
done
# Rerank (Jina's and Cohere's API, as vLLM and TEI serve it) with a cross-encoder: CrossEncoder's scores, best first.
run 0 python3 - "$port" "$FIX/rerank-minilm/expected.json" <<'PY'
import json, sys, urllib.error, urllib.request
port, want = sys.argv[1], json.load(open(sys.argv[2]))
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode())
    try:
        return 200, json.loads(urllib.request.urlopen(req).read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
best = sorted(range(len(want["scores"])), key=lambda i: -want["scores"][i])
status, r = post("/v1/rerank", {"model": "rr", "query": want["query"], "documents": want["documents"], "top_n": 3})
assert status == 200 and [x["index"] for x in r["results"]] == best[:3], r
assert all(abs(x["relevance_score"] - want["scores"][x["index"]]) < 1e-5 and
           x["document"]["text"] == want["documents"][x["index"]] for x in r["results"]), r
assert r["usage"]["total_tokens"] == sum(len(i) for i in want["ids"]), r["usage"]
xlmr = json.load(open(sys.argv[2].replace("rerank-minilm", "rerank-xlmr")))
qwen3 = json.load(open(sys.argv[2].replace("rerank-minilm", "rerank-qwen3")))
# GGUF rerankers (Q8_0: 1.5e-3 off on this 32-wide model)
for name, bound, w in (("rrx", 1e-5, xlmr), ("rrq", 1e-2, xlmr), ("rr3", 1e-5, qwen3), ("rr3hf", 1e-5, qwen3)):
    status, r = post("/v1/rerank", {"model": name, "query": w["query"], "documents": w["documents"]})
    assert status == 200 and r["usage"]["total_tokens"] == sum(len(i) for i in w["ids"]), (name, r)
    assert all(abs(x["relevance_score"] - w["scores"][x["index"]]) < bound for x in r["results"]), (name, r)
# TEI's shape (as llama-server takes it too): "texts", a bare array best first with "score" and "text"; a request
# without a model where several classifiers are served names the count
status, r = post("/rerank", {"model": "rr", "query": want["query"], "texts": want["documents"], "return_text": True})
assert status == 200 and [x["index"] for x in r] == best and r[0]["text"] == want["documents"][best[0]], r
assert all(abs(x["score"] - want["scores"][x["index"]]) < 1e-5 for x in r), r
for alias in ("/reranking", "/v1/reranking"):  # llama-server's names
    status, again = post(alias, {"model": "rr", "query": want["query"], "texts": want["documents"], "return_text": True})
    assert status == 200 and again == r, (alias, again)
status, r = post("/rerank", {"query": want["query"], "texts": want["documents"]})
assert status == 400 and "text classifiers are served" in r["error"]["message"], r
# vLLM's /v1/score: each pair's score in the order asked, one text_1 against all, or pair by pair
for text_1 in (want["query"], [want["query"]] * len(want["documents"])):
    status, r = post("/v1/score", {"model": "rr", "text_1": text_1, "text_2": want["documents"]})
    assert status == 200 and [x["index"] for x in r["data"]] == list(range(len(want["documents"]))), r
    assert all(x["object"] == "score" and abs(x["score"] - s) < 1e-5 for x, s in zip(r["data"], want["scores"])), r
    assert r["usage"]["total_tokens"] == sum(len(i) for i in want["ids"]), r["usage"]
# TEI's /predict on a classifier: each text's labels by probability, best first (a list of those for a list)
bert = json.load(open(sys.argv[2].replace("rerank-minilm", "bert")))
ranked = lambda probs: sorted(zip(probs, bert["labels"]), key=lambda x: -x[0])
status, r = post("/predict", {"model": "cls", "inputs": bert["texts"][0]["text"]})
assert status == 200 and [x["label"] for x in r] == [l for _, l in ranked(bert["texts"][0]["probs"])], r
assert all(abs(x["score"] - p) < 1e-5 for x, (p, _) in zip(r, ranked(bert["texts"][0]["probs"]))), r
status, r = post("/predict", {"model": "cls", "inputs": [t["text"] for t in bert["texts"][:2]],
                              "parameters": {"top_k": 1}})
assert status == 200 and [[x["label"] for x in row] for row in r] == \
    [[ranked(t["probs"])[0][1]] for t in bert["texts"][:2]], r
status, r = post("/predict", {"model": "cls", "inputs": [["a", "b"]]})
assert status == 400 and "pairs" in r["error"]["message"], r
status, r = post("/score", {"model": "rr", "text_1": ["a", "b"], "text_2": ["c", "d", "e"]})
assert status == 400 and "one text_1, or as many as text_2" in r["error"]["message"], r
status, r = post("/rerank", {"model": "rr", "query": want["query"], "return_documents": False,
                             "documents": [{"text": d} for d in want["documents"]]})
assert status == 200 and len(r["results"]) == len(want["documents"]) and "document" not in r["results"][0], r
for body, says in (({"model": "emb", "query": "q", "documents": ["d"]}, "not a reranker"),
                   ({"model": "cls", "query": "q", "documents": ["d"]}, "scores a pair with one"),
                   ({"model": "rr", "query": "q", "documents": []}, "'documents' must be"),
                   ({"model": "rr", "query": "q", "documents": ["d"], "top_n": 0}, "top_n")):
    status, r = post("/v1/rerank", body)
    assert status == 400 and says in r["error"]["message"], (body, status, r)
print("rerank served ok")
PY
run 0 "$ORACLE_PY" - "$port" "$FIX/embed-minilm/expected.json" <<'PY'
import json, sys
import openai
port, want = sys.argv[1], json.load(open(sys.argv[2]))
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
r = client.embeddings.create(model="emb", input=want["texts"])  # (the client asks for base64 and decodes it)
assert len(r.data) == len(want["texts"]), r
assert all(max(abs(a - b) for a, b in zip(d.embedding, w)) < 1e-5 for d, w in zip(r.data, want["embeddings"])), r
r = client.embeddings.create(model="emb", input="What a wonderful, happy day!", encoding_format="float")
assert max(abs(a - b) for a, b in zip(r.data[0].embedding, want["embeddings"][0])) < 1e-5, r
print("openai client ok")
PY
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"
echo "ok"
