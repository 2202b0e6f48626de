#!/usr/bin/env bash
# Ollama's API (/api/chat, /api/generate, /api/embed, /api/embeddings,
# /api/tags, /api/show, /api/version) as Ollama's own Python client calls it
# (the PyTorch 2 environment's, bench/torch2_venv.sh: required), on the
# Qwen2.5-style folder of cli.hf_qwen2_chat and the MiniLM embedder:
# - a greedy chat, whole and streamed (NDJSON), is transformers' reply to
#   the folder's conversation, with its prompt and reply counts;
# - /api/generate templates its prompt (after its system) as that chat, and
#   raw takes the rendered prompt as it is: the same reply;
# - a conversation with Ollama's tool calls and tool results answers as the
#   same conversation does through /v1/chat/completions;
# - format (a JSON schema, or "json") constrains the reply to JSON;
# - /api/embed's embeddings are sentence-transformers' (normalised), the
#   older /api/embeddings' too;
# - tags, show (template, context, capabilities), version; and bad requests
#   are Ollama-shaped errors naming what is wrong.
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
require_oracle transformers tokenizers gguf sentencepiece google.protobuf openai ollama jsonschema
PY="$ORACLE_PY"
qwen2_chat_folder

port="$(free_port)"
"$KILN" serve --model qwen="hf:$MODEL" --model emb="hf:$ROOT/tests/hf/fixtures/embed-minilm" --port "$port" \
  >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
run 0 "$PY" - "$port" "$MODEL" "$ROOT/tests/hf/fixtures/embed-minilm/expected.json" <<'PY'
import json, os, sys, urllib.request
import jsonschema, ollama, openai
port, folder, embedded = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
want = json.load(open(f"{folder}/expected.json"))
client = ollama.Client(host=f"http://127.0.0.1:{port}")
n = len(want["greedy_ids"])
greedy = {"temperature": 0, "num_predict": n}

r = client.chat(model="qwen", messages=want["messages"], options=greedy, stream=False)
assert r.message.role == "assistant" and r.message.content == want["greedy_text"], (r.message, want["greedy_text"])
assert r.done and r.done_reason == "length" and r.eval_count == n, r
assert r.prompt_eval_count == len(want["prompt_ids"]), (r.prompt_eval_count, len(want["prompt_ids"]))
assert r.total_duration >= r.prompt_eval_duration + r.eval_duration > 0 and r.eval_duration > 0, r
print("/api/chat: transformers' greedy reply and counts")
chunks = list(client.chat(model="qwen", messages=want["messages"], options=greedy, stream=True))
assert "".join(c.message.content for c in chunks) == want["greedy_text"], chunks
assert all(not c.done for c in chunks[:-1]) and chunks[-1].done and chunks[-1].eval_count == n, chunks[-1]
print(f"/api/chat streamed: {len(chunks)} lines, the same reply")

system, user = want["messages"][0]["content"], want["messages"][1]["content"]
g = client.generate(model="qwen", system=system, prompt=user, options=greedy, stream=False)
assert g.response == want["greedy_text"] and g.done_reason == "length", g
raw = client.generate(model="qwen", prompt=want["prompt"], raw=True, options=greedy, stream=False)
assert raw.response == want["greedy_text"] and raw.prompt_eval_count == len(want["prompt_ids"]), raw
streamed = "".join(c.response for c in client.generate(model="qwen", prompt=want["prompt"], raw=True, options=greedy,
                                                          stream=True))
assert streamed == want["greedy_text"], streamed
print("/api/generate: templated and raw, whole and streamed: the same reply")

# Ollama's tool calls (arguments as objects, results by tool name) are the OpenAI conversation they stand for.
# (its keys in the order the ollama client writes them, which the template's tojson keeps)
tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
          "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}]
ollama_messages = [{"role": "user", "content": "Weather in Paris and Oslo?"},
                   {"role": "assistant", "content": "", "tool_calls": [
                       {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                       {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
                   {"role": "tool", "content": "18C and sunny", "tool_name": "get_weather"},
                   {"role": "tool", "content": "4C and raining", "tool_name": "get_weather"}]
openai_messages = [ollama_messages[0],
                   {"role": "assistant", "content": "", "tool_calls": [
                       {"id": f"call_{i}", "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}
                       for i, city in enumerate(["Paris", "Oslo"])]},
                   {"role": "tool", "content": "18C and sunny", "tool_call_id": "call_0"},
                   {"role": "tool", "content": "4C and raining", "tool_call_id": "call_1"}]
o = client.chat(model="qwen", messages=ollama_messages, tools=tools, options=greedy, stream=False)
oa = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
a = oa.chat.completions.create(model="qwen", messages=openai_messages, tools=tools, temperature=0, max_tokens=n)
assert o.prompt_eval_count == a.usage.prompt_tokens and o.message.content == (a.choices[0].message.content or ""), \
    (o, a)
print("/api/chat with tool calls and results: the OpenAI conversation's prompt and reply")

# format: "json" and a JSON schema constrain the reply as response_format does (a random model under the grammar).
schema = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
          "required": ["n", "ok"], "additionalProperties": False}
for fmt in (schema, "json"):
    done = client.chat(model="qwen", messages=want["messages"], format=fmt, stream=False,
                       options={"temperature": 0, "num_predict": 200})
    if done.done_reason == "stop":
        doc = json.loads(done.message.content)
        if fmt == schema:
            jsonschema.validate(doc, schema)
        print(f"format {'schema' if fmt == schema else 'json'}:", done.message.content[:60])
    else:  # cut by num_predict: still the start of a JSON document
        assert done.message.content.lstrip().startswith(("{", "[")), done.message.content[:80]
print("/api/chat format: JSON as asked")

e = client.embed(model="emb", input=embedded["texts"][:3])
assert len(e.embeddings) == 3 and e.prompt_eval_count > 0, e
worst = max(abs(x - y) for got, w in zip(e.embeddings, embedded["embeddings"]) for x, y in zip(got, w))
assert worst < 1e-5, worst
cut = client.embed(model="emb", input=embedded["texts"][4], truncate=True)  # (Ollama's default: cut)
assert max(abs(x - y) for x, y in zip(cut.embeddings[0], embedded["embeddings"][4])) < 1e-5
old = client.embeddings(model="emb", prompt=embedded["texts"][0])
assert max(abs(x - y) for x, y in zip(old.embedding, embedded["embeddings"][0])) < 1e-5
print("/api/embed and /api/embeddings: sentence-transformers' embeddings")

listed = client.list().models
assert sorted(m.model for m in listed) == ["emb", "qwen"], listed
weights = {"qwen": os.path.getsize(f"{folder}/model.safetensors")}
assert all(m.size > 0 for m in listed) and [m.size for m in listed if m.model == "qwen"] == [weights["qwen"]], listed
running = client.ps().models  # /api/ps: every served model is held in memory, on the CPU here
assert sorted(m.model for m in running) == ["emb", "qwen"] and all(m.size_vram == 0 for m in running), running
assert all(m.expires_at.year > 2100 and m.details.family for m in running), running
assert [m.context_length for m in running if m.model == "qwen"][0] > 0, running
show = client.show("qwen")
assert show.template == open(f"{folder}/chat_template.jinja", encoding="utf-8").read(), show.template[:80]
assert show.modelinfo["qwen2.context_length"] > 0 and "completion" in show.capabilities, show
assert "tools" in show.capabilities and client.show("emb").capabilities == ["embedding"], show.capabilities
with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version") as v:
    assert json.loads(v.read())["version"], "no version"
print("/api/tags, /api/show and /api/version")

for call, status, words in [
        (lambda: client.chat(model="nope", messages=want["messages"], stream=False), 404, "unknown model 'nope'"),
        (lambda: client.chat(model="qwen", messages=want["messages"], options={"mirostat": 2}, stream=False), 400,
         "mirostat"),
        (lambda: client.chat(model="qwen", messages=want["messages"], options={"num_predict": 0}, stream=False), 400,
         "num_predict"),
        (lambda: client.chat(model="qwen", stream=False, messages=[{"role": "user", "content": "x", "images": ["aGk="]}]),
         400, "text models"),
        (lambda: client.embed(model="qwen", input="x"), 400, "not a text embedder"),
        # the fixture's fifth text is past its 16 tokens: with truncate false, an error, as Ollama's
        (lambda: client.embed(model="emb", input=embedded["texts"][4], truncate=False), 413, "past the 16")]:
    try:
        call()
        raise SystemExit(f"taken: {words}")
    except ollama.ResponseError as err:
        assert err.status_code == status and words in err.error, (err.status_code, err.error)
print("bad requests: Ollama's errors, naming what is wrong")
PY
expect_lines 8 "^/api/|^bad requests"
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"
echo "ok"
