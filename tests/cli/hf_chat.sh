#!/usr/bin/env bash
# kiln serve's /v1/chat/completions and kiln chat, on a fixture model served
# with a chat template: the greedy reply is transformers' generate() on
# apply_chat_template's ids (tests/hf/fixtures/chat), streamed or not, with
# usage, finish reasons, stop strings and log-probabilities in OpenAI's
# shapes; bad requests get 400 in OpenAI's error shape. The official openai
# client drives the same server too (the PyTorch 2 environment's,
# bench/torch2_venv.sh: required).
source "$(dirname "$0")/lib.sh"
FIX="$(cd "$(dirname "$0")/../hf/fixtures" && pwd)"
require_oracle openai
MODEL="$(python3 -c "import json; print(json.load(open('$FIX/chat/expected.json'))['served']['model'])")"
TEMPLATE="$(python3 -c "import json; print(json.load(open('$FIX/chat/expected.json'))['served']['template'])")"

# A template the tokenizer cannot end a turn with, or one Kiln does not know, stops the server at load.
port="$(free_port)"
run 1 "$KILN" serve --model m="hf:$FIX/$MODEL" --chat-template chatml --port "$port"
expect "<\|im_end\|>, which is not a token"
run 1 "$KILN" serve --model m="hf:$FIX/$MODEL" --chat-template vicuna --port "$port"
expect "unknown chat template 'vicuna'; the known ones are chatml, llama3"

"$KILN" serve --model chat="hf:$FIX/$MODEL" --model plain="hf:$FIX/llama-gqa" --chat-template "$TEMPLATE" \
  --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
run 0 python3 - "$port" "$FIX/chat/expected.json" <<'PY'
import json, sys, urllib.error, urllib.request
port, want = sys.argv[1], json.load(open(sys.argv[2]))["served"]
def post(body, path="chat/completions"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/{path}", json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
def chat(**fields):
    status, body = post(dict(model="chat", messages=want["messages"], temperature=0, max_tokens=12, **fields))
    assert status == 200, (status, body)
    return body
reply, n = want["greedy_text"], len(want["greedy_ids"])
r = json.loads(chat())
assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-"), r
c = r["choices"][0]
assert c["message"] == {"role": "assistant", "content": reply} and c["finish_reason"] == "length", (c, reply)
assert r["usage"] == {"prompt_tokens": len(want["prompt_ids"]), "completion_tokens": n,
                      "total_tokens": len(want["prompt_ids"]) + n,
                      "prompt_tokens_details": {"cached_tokens": r["usage"]["prompt_tokens_details"]["cached_tokens"]}}, r
# Asked again, the prompt's whole pages (16 positions each, all but its last token) come from the prefix cache
again = json.loads(chat())
assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == (len(want["prompt_ids"]) - 1) // 16 * 16, again
assert again["choices"][0]["message"]["content"] == reply, again
# Streamed: the role first, then the text in pieces, the finish reason, the usage, [DONE].
events = [l[6:] for l in chat(stream=True, stream_options={"include_usage": True}).split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events
chunks = [json.loads(e) for e in events[:-1]]
assert all(ch["object"] == "chat.completion.chunk" for ch in chunks), chunks
assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}, chunks[0]
assert "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks[:-1]) == reply, chunks
assert chunks[-2]["choices"][0]["finish_reason"] == "length" and chunks[-1]["choices"] == [], chunks[-2:]
assert chunks[-1]["usage"]["completion_tokens"] == n, chunks[-1]
# Log-probabilities of the reply's tokens: greedy, so each is its position's most likely.
lp = json.loads(chat(logprobs=True, top_logprobs=2))["choices"][0]["logprobs"]["content"]
assert len(lp) == n and all(len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["logprob"] == e["logprob"] <= 0
                            and bytes(e["bytes"]).decode("utf-8", "replace") == e["token"] for e in lp), lp
streamed = [json.loads(l[6:]) for l in chat(logprobs=True, stream=True).split("\n") if l.startswith("data: {")]
assert sum(len((ch["choices"][0]["logprobs"] or {}).get("content", [])) for ch in streamed) == n, streamed
# max_completion_tokens (OpenAI's newer name) and stop strings.
r = json.loads(post(dict(model="chat", messages=want["messages"], temperature=0, max_completion_tokens=5))[1])
assert r["usage"]["completion_tokens"] == 5 and r["choices"][0]["finish_reason"] == "length", r
stop = reply[4:7]
r = json.loads(chat(stop=[stop]))
assert r["choices"][0]["message"]["content"] == reply[:reply.find(stop)] and r["choices"][0]["finish_reason"] == "stop", r
# /v1/completions returns the generated tokens' log-probabilities too.
status, body = post(dict(model="plain", prompt="The best way", max_tokens=6, temperature=0, logprobs=3), "completions")
lp = json.loads(body)["choices"][0]["logprobs"]
assert status == 200 and len(lp["tokens"]) == 6 and all(len(t) >= 1 for t in lp["top_logprobs"]), body
# Bad requests: 400 (404 for an unknown model) in OpenAI's error shape, naming the problem.
bad = [({"messages": []}, 400, "non-empty array"),
       ({"messages": [{"role": "wizard", "content": "hi"}]}, 400, "role is 'wizard'"),
       ({"messages": [{"role": "user", "content": 42}]}, 400, "content must be a string"),
       ({"messages": [{"role": "user"}]}, 400, "has no 'content'"),
       ({"messages": [{"role": "user", "content": "word " * 400}]}, 400, "over the model's context"),
       ({"messages": want["messages"], "tools": [{"type": "function"}]}, 400, "tools[0] must be"),
       ({"messages": want["messages"], "tools": [{"type": "function", "function": {"name": "f"}}]}, 400,
        "has no tools; use the model's own Jinja template"),
       ({"messages": want["messages"], "n": 129}, 400, "n must be in [1, 128]"),
       ({"messages": want["messages"], "temprature": 0}, 400, "unknown field 'temprature'"),
       ({"messages": want["messages"], "model": "nope"}, 404, "unknown model 'nope'")]
for fields, code, words in bad:
    status, body = post({"model": "chat", **fields})
    err = json.loads(body).get("error")
    assert err and status == code and words in err["message"] and err["code"] == code, (fields, status, body)
    assert err["type"] == ("not_found_error" if code == 404 else "invalid_request_error"), body
# The paged KV cache, seen in /metrics: a conversation sent again takes its
# prompt's whole pages from the prefix cache instead of computing them.
import socket, time
def metric(name, model="chat"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f'{name}{{model="{model}"}} '):
                return float(line.split()[-1])
def settles(done):  # the scheduler updates /metrics after it answers a step
    for _ in range(200):
        if done():
            return True
        time.sleep(0.05)
    return False
story = [{"role": "user", "content": "Tell me a story about " + "a cat and a dog, " * 8}]
first = json.loads(post(dict(model="chat", messages=story, temperature=0, max_tokens=4))[1])
assert settles(lambda: metric("kiln_kv_cache_pages_in_use") == 0)
reused = metric("kiln_prefix_cache_positions_total")
again = json.loads(post(dict(model="chat", messages=story, temperature=0, max_tokens=4))[1])
assert first["choices"][0]["message"] == again["choices"][0]["message"], (first, again)
assert first["usage"]["prompt_tokens"] >= 32 and settles(lambda: metric("kiln_prefix_cache_positions_total") - reused >= 16), \
    (first["usage"], reused, metric("kiln_prefix_cache_positions_total"))
assert settles(lambda: metric("kiln_kv_cache_pages_in_use") == 0) and metric("kiln_kv_cache_pages_cached") > 0
# A client that hangs up mid-stream leaves the server serving, and its pages go back to the pool.
s = socket.create_connection(("127.0.0.1", int(port)))
body = json.dumps(dict(model="chat", messages=want["messages"], max_tokens=60, stream=True, ignore_eos=True)).encode()
s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
s.recv(100)
s.close()
assert settles(lambda: metric("kiln_kv_cache_pages_in_use") == 0), metric("kiln_kv_cache_pages_in_use")
assert json.loads(chat())["choices"][0]["message"]["content"] == reply
print("chat served ok; the prefix cache reused a repeated conversation's pages; a hung-up stream's pages went back")
PY
cat "$OUT"

run 0 "$ORACLE_PY" - "$port" "$FIX/chat/expected.json" <<'PY'
import json, sys
import openai
port, want = sys.argv[1], json.load(open(sys.argv[2]))["served"]
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
r = client.chat.completions.create(model="chat", messages=want["messages"], temperature=0, max_tokens=12, seed=1)
assert r.choices[0].message.content == want["greedy_text"] and r.choices[0].finish_reason == "length", r
assert r.usage.completion_tokens == len(want["greedy_ids"]), r
stream = client.chat.completions.create(model="chat", messages=want["messages"], temperature=0, max_tokens=12,
                                        stream=True, stream_options={"include_usage": True})
parts, usage = [], None
for chunk in stream:
    if chunk.choices:
        parts.append(chunk.choices[0].delta.content or "")
    usage = chunk.usage or usage
assert "".join(parts) == want["greedy_text"] and usage.completion_tokens == len(want["greedy_ids"]), (parts, usage)
r = client.chat.completions.create(model="chat", messages=want["messages"], temperature=0, max_tokens=3,
                                   logprobs=True, top_logprobs=2)
assert len(r.choices[0].logprobs.content) == 3 and len(r.choices[0].logprobs.content[0].top_logprobs) == 2, r
try:
    client.chat.completions.create(model="chat", messages=[])
    raise SystemExit("an empty conversation was answered")
except openai.BadRequestError as e:
    assert "non-empty array" in e.message, e.message
print("openai client ok")
PY
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"

# kiln chat: replies stream to stdout; /reset starts the conversation over.
system="$(python3 -c "import json; print(json.load(open('$FIX/chat/expected.json'))['served']['messages'][0]['content'])")"
question="$(python3 -c "import json; print(json.load(open('$FIX/chat/expected.json'))['served']['messages'][1]['content'])")"
printf '%s\n/reset\n%s\n' "$question" "$question" >"$WORK/input.txt"
run 0 "$KILN" chat "hf:$FIX/$MODEL" --chat-template "$TEMPLATE" --system "$system" --temperature 0 --max-tokens 12 \
  <"$WORK/input.txt"
python3 - "$OUT" "$FIX/chat/expected.json" <<'PY' || fail "kiln chat's replies differ from generate()"
import json, sys
reply = json.load(open(sys.argv[2]))["served"]["greedy_text"]
got = open(sys.argv[1], encoding="utf-8").read()
sys.exit(0 if got == f"{reply}\n(conversation cleared)\n{reply}\n" else 1)
PY
run 1 "$KILN" chat "hf:$FIX/llama-gqa" </dev/null
expect "has no chat template .*--chat-template NAME"
echo "ok"
