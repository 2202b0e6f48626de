#!/usr/bin/env bash
# Repetition penalties, min-p and a model's own sampling defaults, against
# transformers' generate() on the Qwen2.5-style folder of cli.hf_qwen2_chat
# (tiny random weights), copied with a generation_config.json that sets
# repetition_penalty (and temperature, top_k, top_p), as Qwen2.5's does.
# A random model over 151K tokens never repeats itself, so the repetition
# penalties here reward repeats (below 1), and the OpenAI penalties are
# checked against the repeats that brings: then each changes the tokens.
# - served, a greedy completion that leaves the penalty out gets the
#   model's (as vLLM does): transformers' greedy tokens, which its
#   generate() gives with the folder's generation_config;
# - one that sends repetition_penalty (vLLM's name) or repeat_penalty
#   (llama-server's) gets that one instead; presence_penalty and
#   frequency_penalty are OpenAI's (the completion's own tokens, once and
#   by count), checked through a logits processor that applies them;
# - min_p 1 at temperature 1.5 keeps the most likely token alone: greedy;
# - OpenAI's logit_bias of -100 on the greedy first token: transformers'
#   tokens under the same sequence_bias; a token past the vocabulary is a 400;
# - each of these changes the tokens (none of the checks is vacuous);
# - `kiln export --format gguf` keeps the defaults as llama.cpp's converter
#   does (general.sampling.*), and `kiln sample` of the file and of the
#   folder takes them as the server does;
# - the file as ollama:pen, from a store whose Modelfile sets PARAMETER
#   repeat_penalty, stop and SYSTEM: sampled and served with those over the
#   file's own (a request's stop replaces the Modelfile's).
source "$(dirname "$0")/lib.sh"
require_oracle transformers tokenizers gguf sentencepiece google.protobuf openai
PY="$ORACLE_PY"
qwen2_chat_folder

PEN="$WORK/penalized"
linked_copy "$MODEL" "$PEN" generation_config.json
python3 - "$MODEL/generation_config.json" "$PEN/generation_config.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
g.update({"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.8, "repetition_penalty": 0.6})
json.dump(g, open(sys.argv[2], "w"), indent=2)
PY
PROMPT="The the the cat sat on the mat, and the cat"
N=24

# transformers' greedy tokens under each setting (eos banned until N tokens, as Kiln's ignore_eos bans it).
run 0 "$PY" - "$PEN" "$PROMPT" "$N" "$WORK/expected.json" <<'PY'
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList
folder, prompt, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
ids = tok(prompt, return_tensors="pt")

class OpenAiPenalties(LogitsProcessor):
    """OpenAI's presence and frequency penalties over the completion's tokens (vLLM's order: frequency, then presence)."""
    def __init__(self, start, presence, frequency):
        self.start, self.presence, self.frequency = start, presence, frequency
    def __call__(self, input_ids, scores):
        counts = torch.zeros_like(scores)
        counts.scatter_add_(1, input_ids[:, self.start:], torch.ones_like(input_ids[:, self.start:], dtype=scores.dtype))
        scores = scores - self.frequency * counts
        return scores - self.presence * (counts > 0).to(scores.dtype)

def greedy(**kw):
    with torch.no_grad():
        g = model.generate(**ids, do_sample=False, max_new_tokens=n, min_new_tokens=n, **kw)
    return tok.decode(g[0][ids["input_ids"].shape[1]:])

start = ids["input_ids"].shape[1]
first = tok(greedy(repetition_penalty=1.0), add_special_tokens=False)["input_ids"][0]
want = {
    "first": first,
    "biased": greedy(repetition_penalty=1.0, sequence_bias={(first,): -100.0}),
    "defaults": greedy(),  # the folder's generation_config: repetition_penalty 0.6
    "none": greedy(repetition_penalty=1.0),
    "rewarded": greedy(repetition_penalty=0.5),
    # (generate() runs a processor it is given after its own: the repetition penalty first, as vLLM does)
    "openai": greedy(repetition_penalty=0.5, logits_processor=LogitsProcessorList([OpenAiPenalties(start, 1.0, 0.5)])),
}
assert len({want[k] for k in ("defaults", "none", "rewarded", "openai", "biased")}) == 5, want  # each changes the tokens
json.dump(want, open(out, "w"), indent=2)
print(json.dumps(want, indent=2))
PY

port="$(free_port)"
"$KILN" serve --model pen="hf:$PEN" --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
grep -q "pen samples with its own defaults .*temperature 0.7, top_k 20, top_p 0.8, repetition_penalty 0.6" \
  "$WORK/serve.log" || { cp "$WORK/serve.log" "$OUT"; fail "the server does not say it samples with the model's defaults"; }
run 0 "$PY" - "$port" "$PROMPT" "$N" "$WORK/expected.json" <<'PY'
import json, sys
import openai
port, prompt, n, want = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.load(open(sys.argv[4]))
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
def text(extra={}, **kw):  # extra: the fields the openai client does not name (llama-server's, vLLM's)
    return client.completions.create(model="pen", prompt=prompt, max_tokens=n, extra_body={"ignore_eos": True, **extra},
                                     **kw).choices[0].text
checks = [
    ("the model's repetition_penalty", text(temperature=0), want["defaults"]),
    ("repetition_penalty 1 (off)", text(temperature=0, extra={"repetition_penalty": 1.0}), want["none"]),
    ("repetition_penalty 0.5", text(temperature=0, extra={"repetition_penalty": 0.5}), want["rewarded"]),
    ("repeat_penalty 0.5 (llama-server's)", text(temperature=0, extra={"repeat_penalty": 0.5}), want["rewarded"]),
    ("presence 1 and frequency 0.5", text(temperature=0, presence_penalty=1.0, frequency_penalty=0.5,
                                        extra={"repetition_penalty": 0.5}), want["openai"]),
    ("min_p 1 at temperature 1.5", text(temperature=1.5, seed=3, extra={"min_p": 1.0}), want["defaults"]),
    ("logit_bias -100 on the first token", text(temperature=0, logit_bias={str(want["first"]): -100},
                                                extra={"repetition_penalty": 1.0}), want["biased"]),
]
for name, got, expected in checks:
    assert got == expected, (name, got, expected)
    print(f"served, {name}: transformers' greedy tokens")
try:
    text(temperature=0, logit_bias={"999999": 5})
    raise SystemExit("a logit_bias past the vocabulary was taken")
except openai.BadRequestError as e:
    assert "logit_bias names token 999999" in str(e), e
# n choices through OpenAI's client: the i-th is the chat sampled with seed + i, streamed or not.
def chat(**kw):
    return client.chat.completions.create(model="pen", messages=[{"role": "user", "content": prompt}], max_tokens=n,
                                          temperature=1.0, extra_body={"ignore_eos": True}, **kw)
singles = [chat(seed=5 + i).choices[0].message.content for i in range(3)]
both = chat(seed=5, n=3)
assert [c.index for c in both.choices] == [0, 1, 2] and [c.message.content for c in both.choices] == singles, both
assert len(set(singles)) > 1 and both.usage.completion_tokens == 3 * n, (singles, both.usage)
streamed = ["", "", ""]
for event in chat(seed=5, n=3, stream=True):
    for c in event.choices:
        streamed[c.index] += c.delta.content or ""
assert streamed == singles, (streamed, singles)
print("served, n 3: the chats of seeds 5, 6 and 7, plain and streamed")
PY
expect_lines 7 "transformers' greedy tokens"
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"

# --precision bf16 serves the model through a wrapper: the model's own defaults still apply.
"$KILN" serve --model pen="hf:$PEN" --precision bf16 --port "$port" >"$WORK/serve16.log" 2>&1 &
server=$!
LOG="$WORK/serve16.log" wait_for_server "$port" "$server"
grep -q "pen samples with its own defaults .*repetition_penalty 0.6" "$WORK/serve16.log" ||
  { cp "$WORK/serve16.log" "$OUT"; fail "--precision bf16 drops the model's sampling defaults"; }
run 0 "$PY" - "$port" "$PROMPT" "$N" <<'PY'
import sys
import openai
port, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
def text(**extra):
    return client.completions.create(model="pen", prompt=prompt, max_tokens=n, temperature=0,
                                     extra_body={"ignore_eos": True, **extra}).choices[0].text
left_out, own, off = text(), text(repetition_penalty=0.6), text(repetition_penalty=1.0)
assert left_out == own != off, (left_out, own, off)
print("bf16: a request that leaves the penalty out gets the model's")
PY
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"

# The defaults in a GGUF file (as convert_hf_to_gguf.py writes them), and `kiln sample` of the file and the folder.
run 0 "$KILN" export "hf:$PEN" --format gguf --gguf-type f32 --out "$WORK/pen.gguf"
run 0 "$PY" - "$WORK/pen.gguf" <<'PY'
import sys
import gguf
r = gguf.GGUFReader(sys.argv[1])
got = {k: float(r.fields[k].parts[-1][0]) for k in ("general.sampling.temp", "general.sampling.top_k",
                                                     "general.sampling.top_p", "general.sampling.penalty_repeat")}
want = {"general.sampling.temp": 0.7, "general.sampling.top_k": 20, "general.sampling.top_p": 0.8,
        "general.sampling.penalty_repeat": 0.6}
assert all(abs(got[k] - want[k]) < 1e-6 for k in want), got
print("the GGUF file keeps the sampling defaults")
PY
for spec in "hf:$PEN" "gguf:$WORK/pen.gguf"; do
  run 0 "$KILN" sample "$spec" --prompt "$PROMPT" --temperature 0 --max-tokens "$N" --ignore-eos --count 1
  python3 - "$OUT" "$PROMPT" "$WORK/expected.json" <<'PY' || fail "kiln sample $spec: not transformers' greedy tokens with the model's penalty"
import json, sys
out, prompt, want = open(sys.argv[1], encoding="utf-8").read(), sys.argv[2], json.load(open(sys.argv[3]))["defaults"]
sys.exit(0 if prompt + want in out else 1)
PY
done
run 0 "$KILN" sample "hf:$PEN" --prompt "$PROMPT" --temperature 0 --max-tokens "$N" --ignore-eos --count 1 \
  --repeat-penalty 0.5
python3 - "$OUT" "$PROMPT" "$WORK/expected.json" <<'PY' || fail "kiln sample --repeat-penalty 0.5: not transformers' tokens"
import json, sys
out, prompt, want = open(sys.argv[1], encoding="utf-8").read(), sys.argv[2], json.load(open(sys.argv[3]))["rewarded"]
sys.exit(0 if prompt + want in out else 1)
PY

# ollama:NAME, in a store as `ollama create` leaves one from a Modelfile with PARAMETER repeat_penalty 0.5, a
# PARAMETER stop and a SYSTEM: they apply over the file's own (its 0.6) where a request leaves them out, as
# `ollama run` and `ollama serve` apply them.
export OLLAMA_MODELS="$WORK/ollama"
mkdir -p "$OLLAMA_MODELS/blobs" "$OLLAMA_MODELS/manifests/registry.ollama.ai/library/pen"
STOP="$(python3 -c 'import json, sys; t = json.load(open(sys.argv[1]))["rewarded"]; print(t[len(t) // 2:len(t) // 2 + 4])' \
  "$WORK/expected.json")"
python3 - "$OLLAMA_MODELS" "$WORK/pen.gguf" "$STOP" <<'PY'
import hashlib, json, os, sys
store, gguf, stop = sys.argv[1:]
def layer(kind, data=None, path=None):
    data = data if data is not None else open(path, "rb").read()
    digest = hashlib.sha256(data).hexdigest()
    open(f"{store}/blobs/sha256-{digest}", "wb").write(data)
    return {"mediaType": f"application/vnd.ollama.image.{kind}", "digest": f"sha256:{digest}", "size": len(data)}
layers = [layer("model", path=gguf), layer("params", json.dumps({"repeat_penalty": 0.5, "stop": [stop]}).encode()),
          layer("system", b"You are a ship's cat.")]
json.dump({"schemaVersion": 2, "layers": layers}, open(f"{store}/manifests/registry.ollama.ai/library/pen/latest", "w"))
PY
run 0 "$KILN" sample ollama:pen --prompt "$PROMPT" --temperature 0 --max-tokens "$N" --ignore-eos --count 1
python3 - "$OUT" "$PROMPT" "$WORK/expected.json" <<'PY' || fail "kiln sample ollama:pen: not the Modelfile's repeat_penalty"
import json, sys
out, prompt, want = open(sys.argv[1], encoding="utf-8").read(), sys.argv[2], json.load(open(sys.argv[3]))["rewarded"]
sys.exit(0 if prompt + want in out else 1)
PY
"$KILN" serve --model pen=ollama:pen --port "$port" >"$WORK/serve-ollama.log" 2>&1 &
server=$!
LOG="$WORK/serve-ollama.log" wait_for_server "$port" "$server"
grep -q "pen samples with its own defaults .*repetition_penalty 0.5" "$WORK/serve-ollama.log" &&
  grep -q "pen stops at its own stop strings" "$WORK/serve-ollama.log" ||
  { cp "$WORK/serve-ollama.log" "$OUT"; fail "the server does not say it takes the Modelfile's defaults"; }
run 0 "$PY" - "$port" "$PROMPT" "$N" "$WORK/expected.json" "$STOP" <<'PY'
import json, sys
import openai
port, prompt, n, want, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.load(open(sys.argv[4]))["rewarded"], sys.argv[5]
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
def complete(**kw):
    return client.completions.create(model="pen", prompt=prompt, max_tokens=n, temperature=0,
                                     extra_body={"ignore_eos": True}, **kw).choices[0]
cut = complete()
assert cut.text == want[:want.index(stop)] and cut.finish_reason == "stop", (cut, want, stop)
own = complete(stop=["\x01never"])
assert own.text == want and own.finish_reason == "length", (own, want)
print("served ollama:pen: the Modelfile's repeat_penalty and stop, and a request's stop instead")
def chat(messages):
    return client.chat.completions.create(model="pen", messages=messages, max_tokens=n, temperature=0,
                                          stop=["\x01never"], extra_body={"ignore_eos": True}).choices[0].message.content
user = [{"role": "user", "content": prompt}]
left_out = chat(user)
assert left_out == chat([{"role": "system", "content": "You are a ship's cat."}] + user), left_out
assert left_out != chat([{"role": "system", "content": "You are a dog."}] + user), left_out
print("served ollama:pen: a conversation without a system message opens with the Modelfile's SYSTEM")
PY
expect_lines 2 "served ollama:pen"
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"
unset OLLAMA_MODELS

run 1 "$KILN" sample "hf:$PEN" --prompt "x" --min-p 2
expect "min_p must be in \[0, 1\]"
echo "ok"
