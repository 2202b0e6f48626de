#!/usr/bin/env bash
# Hugging Face folders through the kiln command, against what transformers
# answered on the same fixtures (tests/hf/make_fixtures.py): kiln tokenize
# gives tokenizer(text)'s ids, kiln score transformers' log-probabilities,
# kiln sample --temperature 0 generate(do_sample=False)'s text, kiln
# classify the classifiers' probabilities; and bad input is a clear error.
source "$(dirname "$0")/lib.sh"
FIX="$(cd "$(dirname "$0")/../hf/fixtures" && pwd)"

for model in gpt2 llama-gqa mistral qwen2; do
  text="$(python3 -c "import json; print(json.load(open('$FIX/$model/expected.json'))['score_text'])")"
  run 0 "$KILN" tokenize "hf:$FIX/$model" --text "$text" --json
  python3 - "$OUT" "$FIX/$model/expected.json" <<'PY' || fail "$model: kiln tokenize differs from tokenizers"
import json, sys
got = json.load(open(sys.argv[1]))["ids"]
sys.exit(0 if got == json.load(open(sys.argv[2]))["ids"] else 1)
PY
  run 0 "$KILN" score "hf:$FIX/$model" --text "$text" --json
  python3 - "$OUT" "$FIX/$model/expected.json" <<'PY' || fail "$model: kiln score differs from transformers"
import json, math, sys
got, want = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert got["ids"] == want["ids"] and got["logprobs"][0] is None
worst = max(abs(a - b) for a, b in zip(got["logprobs"][1:], want["logprobs_f32"][1:]))
ppl = math.exp(-sum(want["logprobs_f32"][1:]) / (len(want["ids"]) - 1))
sys.exit(0 if worst < 1e-3 and abs(got["perplexity"] - ppl) / ppl < 1e-3 else 1)
PY
  prompt="$(python3 -c "import json; print(json.load(open('$FIX/$model/expected.json'))['prompt'])")"
  run 0 "$KILN" sample "hf:$FIX/$model" --prompt "$prompt" --max-tokens 16 --temperature 0 --count 1
  python3 - "$OUT" "$FIX/$model/expected.json" <<'PY' || fail "$model: greedy sample differs from generate()"
import json, sys
got = open(sys.argv[1], encoding="utf-8").read()
sys.exit(0 if got == json.load(open(sys.argv[2]))["greedy_text"] + "\n---\n" else 1)
PY
done

# A bf16 file runs in bf16 unless --precision fp32 asks for f32.
text="$(python3 -c "import json; print(json.load(open('$FIX/llama-bf16/expected.json'))['score_text'])")"
for precision in auto fp32; do
  run 0 "$KILN" score "hf:$FIX/llama-bf16" --text "$text" --json --precision $precision
  python3 - "$OUT" "$FIX/llama-bf16/expected.json" $precision <<'PY' || fail "llama-bf16 --precision $precision differs from transformers"
import json, sys
got, want = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ref, bar = (want["logprobs_native"], 0.05) if sys.argv[3] == "auto" else (want["logprobs_f32"], 1e-3)
sys.exit(0 if max(abs(a - b) for a, b in zip(got["logprobs"][1:], ref[1:])) < bar else 1)
PY
done
run 1 "$KILN" score "hf:$FIX/llama-bf16" --text "x" --precision fp8
expect "--precision must be auto"

for model in bert distilbert; do
  for i in 0 1 2; do
    text="$(python3 -c "import json; print(json.load(open('$FIX/$model/expected.json'))['texts'][$i]['text'])")"
    run 0 "$KILN" classify "hf:$FIX/$model" --text "$text" --json
    python3 - "$OUT" "$FIX/$model/expected.json" "$i" <<'PY' || fail "$model: kiln classify differs from transformers"
import json, sys
got, want = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
row = want["texts"][int(sys.argv[3])]
probs = [got["probs"][label] for label in want["labels"]]
best = want["labels"][max(range(len(probs)), key=lambda i: row["probs"][i])]
sys.exit(0 if got["label"] == best and max(abs(a - b) for a, b in zip(probs, row["probs"])) < 1e-4 else 1)
PY
  done
done
# kiln tokenize reads only tokenizer.json: a classifier's folder too.
text="$(python3 -c "import json; print(json.load(open('$FIX/bert/expected.json'))['texts'][0]['text'])")"
run 0 "$KILN" tokenize "hf:$FIX/bert" --text "$text" --json
python3 - "$OUT" "$FIX/bert/expected.json" <<'PY' || fail "bert: kiln tokenize differs from tokenizers"
import json, sys
sys.exit(0 if json.load(open(sys.argv[1]))["ids"] == json.load(open(sys.argv[2]))["texts"][0]["ids"] else 1)
PY
run 1 "$KILN" classify "hf:$FIX/llama-gqa" --text "x"
expect "is not a sequence classifier Kiln supports"

# kiln serve --model NAME=hf:DIR: a greedy completion is generate()'s text,
# streamed or not; a scored prompt (echo, max_tokens 0, logprobs) carries
# transformers' log-probabilities; /v1/classify gives transformers' probabilities.
port="$(free_port)"
"$KILN" serve --model lm="hf:$FIX/llama-gqa" --model cls="hf:$FIX/distilbert" --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
run 0 python3 - "$port" "$FIX" <<'PY'
import json, sys, urllib.request
port, fix = sys.argv[1], sys.argv[2]
def post(body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/{body.pop('_path')}", json.dumps(body).encode())
    return urllib.request.urlopen(req).read().decode()
want = json.load(open(f"{fix}/llama-gqa/expected.json"))
continuation = want["greedy_text"][len(want["prompt"]):]
r = json.loads(post({"_path": "completions", "model": "lm", "prompt": want["prompt"], "max_tokens": 16, "temperature": 0}))
assert r["choices"][0]["text"] == continuation, (r, continuation)
assert r["usage"]["prompt_tokens"] == len(want["prompt_ids"]), r
streamed = post({"_path": "completions", "model": "lm", "prompt": want["prompt"], "max_tokens": 16, "temperature": 0,
                 "stream": True})
events = [json.loads(l[6:]) for l in streamed.split("\n") if l.startswith("data: {")]
assert "".join(e["choices"][0]["text"] for e in events) == continuation, streamed
# Concurrent completions share decoding steps (continuous batching) and each
# still gets generate()'s text.
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(6) as pool:
    texts = list(pool.map(lambda _: json.loads(post({"_path": "completions", "model": "lm", "prompt": want["prompt"],
                                                           "max_tokens": 16, "temperature": 0}))["choices"][0]["text"],
                          range(6)))
assert texts == [continuation] * 6, texts
cls = json.load(open(f"{fix}/distilbert/expected.json"))
r = json.loads(post({"_path": "classify", "model": "cls", "input": [t["text"] for t in cls["texts"]]}))
for row, got in zip(cls["texts"], r["data"]):
    probs = [got["probabilities"][label] for label in cls["labels"]]
    assert max(abs(a - b) for a, b in zip(probs, row["probs"])) < 1e-4, (got, row)
# Scoring (lm-evaluation-harness's loglikelihood): echo, max_tokens 0, logprobs.
score_text = want["score_text"]
for prompt in (score_text, want["ids"]):
    r = json.loads(post({"_path": "completions", "model": "lm", "prompt": prompt, "max_tokens": 0, "echo": True,
                         "logprobs": 2, "temperature": 0}))
    lp = r["choices"][0]["logprobs"]
    assert lp["token_logprobs"][0] is None and len(lp["token_logprobs"]) == len(want["ids"]), lp
    assert max(abs(a - b) for a, b in zip(lp["token_logprobs"][1:], want["logprobs_f32"][1:])) < 1e-3, lp
    # (two tokens of the same text, two U+FFFD halves, share one entry of the map, as in OpenAI's format)
    assert all(1 <= len(t) <= 2 and max(t.values()) >= g - 1e-6 for t, g in zip(lp["top_logprobs"][1:], lp["token_logprobs"][1:]))
    assert r["usage"]["prompt_tokens"] == len(want["ids"]) and r["choices"][0]["text"].endswith("reform."), r
# lm-evaluation-harness's local-completions, as it sends them (tokenized requests): loglikelihood batches token-id
# prompts with echo and max_tokens 1, and reads each choice's token_logprobs[ctxlen:-1] and top_logprobs; a
# generation sends token ids too. Each answer is the text prompt's.
r = json.loads(post({"_path": "completions", "model": "lm", "prompt": [want["ids"], want["prompt_ids"]],
                     "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": True}))
first, second = sorted(r["choices"], key=lambda c: c["index"])
lp = first["logprobs"]
assert len(lp["token_logprobs"]) == len(want["ids"]) + 1 and lp["token_logprobs"][0] is None, lp
assert max(abs(a - b) for a, b in zip(lp["token_logprobs"][1:-1], want["logprobs_f32"][1:])) < 1e-3, lp
assert all(max(t.values()) >= g - 1e-6 for t, g in zip(lp["top_logprobs"][1:], lp["token_logprobs"][1:])), lp
assert len(second["logprobs"]["tokens"]) == len(want["prompt_ids"]) + 1, second
assert second["text"] == want["prompt"] + json.loads(post({"_path": "completions", "model": "lm", "prompt": want["prompt"],
                                                          "max_tokens": 1, "temperature": 0}))["choices"][0]["text"], second
assert r["usage"] == {"prompt_tokens": len(want["ids"]) + len(want["prompt_ids"]), "completion_tokens": 2,
                      "total_tokens": len(want["ids"]) + len(want["prompt_ids"]) + 2,
                      "prompt_tokens_details": {"cached_tokens": 0}}, r["usage"]
r = json.loads(post({"_path": "completions", "model": "lm", "prompt": [want["prompt_ids"]], "max_tokens": 16,
                     "temperature": 0, "stop": ["\n\n"], "seed": 1234}))
assert r["choices"][0]["text"] == continuation.split("\n\n")[0], (r, continuation)
# Its tokenizer as lm-evaluation-harness's remote tokenizer reads it: without a chat template, the eos generation ends at.
info = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/tokenizer_info").read())
assert info["eos_token"] == json.load(open(f"{fix}/llama-gqa/tokenizer_config.json"))["eos_token"], info
assert info["chat_template"] is None, info
print("served ok")
PY
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"

# kiln plan --model hf:DIR reads config.json alone (no weights are in
# tests/hf/configs/llama-2-7b): Llama-2-7B's 6,738,415,616 parameters do not
# fine-tune whole on a 24 GB RTX 4090 in fp32, but do in bf16 with the
# optimizer state, master weights and gradients offloaded to ~100 GiB of host memory.
CONFIGS="$(cd "$(dirname "$0")/../hf/configs" && pwd)"
run 0 "$KILN" plan --model "hf:$CONFIGS/llama-2-7b" --gpu RTX-4090 --batch-size 1 --block-size 512
expect "hf:llama, batch 1, 6738.4M parameters, on RTX-4090"
expect "peak 100\.[0-9]+ GiB: does NOT fit"
expect "plan: bf16, checkpointing (none|blocks), micro-batch 1, offload"
expect "host memory: 100\.[0-9]+ GiB"
run 0 "$KILN" plan --model "hf:$CONFIGS/llama-2-7b" --gpu RTX-4090 --batch-size 1 --block-size 512 --json
python3 -c "import json,sys; d=json.load(open('$OUT')); sys.exit(0 if d['parameters'] == 6738415616 else 1)" \
  || fail "the plan counts $(python3 -c "import json; print(json.load(open('$OUT'))['parameters'])") parameters"
# With LoRA (rank 16 on peft's default q_proj and v_proj) it fits the card
# in bf16 with nothing offloaded: the frozen base has no gradients or AdamW state.
run 0 "$KILN" plan --model "hf:$CONFIGS/llama-2-7b" --lora-rank 16 --gpu RTX-4090 --batch-size 1 --block-size 512
expect "LoRA rank 16 trains 8\.4M"
expect "plan: bf16, checkpointing none, micro-batch 1$"
run 1 "$KILN" plan --lora-rank 16 --gpu RTX-4090
expect "--lora-rank plans fine-tuning a Hugging Face model"
run 1 "$KILN" plan --model "$CONFIGS/llama-2-7b" --gpu RTX-4090
expect "--model takes hf:DIR"

# Bad input: clear errors, never a crash.
run 1 "$KILN" tokenize "hf:$WORK/none" --text hi
expect "is not a folder"
mkdir -p "$WORK/arch" && cp -r "$FIX/llama-gqa/." "$WORK/arch/"
sed -i 's/"model_type": "llama"/"model_type": "mamba"/' "$WORK/arch/config.json"
run 1 "$KILN" score "hf:$WORK/arch" --text hi
expect "model_type 'mamba' is not a causal language model Kiln supports"
long="$(python3 -c "print('word ' * 400)")"
run 1 "$KILN" score "hf:$FIX/gpt2" --text "$long"
expect "more than the model's context of 96"
run 1 "$KILN" sample "hf:$FIX/gpt2" --prompt "$long" --max-tokens 2
expect "more than the model's context of 96"
echo "ok"
