#!/usr/bin/env bash
# Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) as the
# anthropic Python client calls it (the PyTorch 2 environment's,
# bench/torch2_venv.sh: required), on the Qwen2.5-style folder of
# cli.hf_qwen2_chat:
# - a greedy message, whole and streamed (its events in Anthropic's order),
#   is transformers' reply to the folder's conversation, with its prompt and
#   reply counts; count_tokens counts that prompt;
# - stop_sequences stop it, naming the sequence;
# - a conversation with tool_use and tool_result blocks is the OpenAI
#   conversation it stands for (the same prompt and reply), and a forced
#   tool call answers as a tool_use block, whole and streamed;
# - a reasoning model's thinking (DeepSeek R1's template) is a thinking
#   block, whole and streamed;
# - bad requests are Anthropic-shaped errors naming what is wrong.
source "$(dirname "$0")/lib.sh"
require_oracle transformers tokenizers gguf sentencepiece google.protobuf openai anthropic
PY="$ORACLE_PY"
qwen2_chat_folder

# The folder with DeepSeek R1's real template, whose prompt opens the reasoning: thinking blocks.
with_template "$WORK/r1" llama-cpp-deepseek-r1

port="$(free_port)"
"$KILN" serve --model qwen="hf:$MODEL" --model r1="hf:$WORK/r1" --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
run 0 "$PY" - "$port" "$MODEL" <<'PY'
import json, sys, urllib.error, urllib.request
import anthropic, openai
port, folder = sys.argv[1], sys.argv[2]
want = json.load(open(f"{folder}/expected.json"))
client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="unused", max_retries=0)
n = len(want["greedy_ids"])
system, user = want["messages"][0]["content"], want["messages"][1]["content"]
# (temperature is no longer the client's own argument: Claude decides; older clients and others still send it)
asked = dict(model="qwen", system=system, messages=[{"role": "user", "content": user}], max_tokens=n,
             extra_body={"temperature": 0})

m = client.messages.create(**asked)
assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_"), m
assert [b.type for b in m.content] == ["text"] and m.content[0].text == want["greedy_text"], (m, want["greedy_text"])
assert m.stop_reason == "max_tokens" and m.stop_sequence is None and m.usage.output_tokens == n, m
assert m.usage.input_tokens + m.usage.cache_read_input_tokens == len(want["prompt_ids"]), m.usage
counted = client.messages.count_tokens(model="qwen", system=system, messages=asked["messages"])
assert counted.input_tokens == len(want["prompt_ids"]), counted
print("/v1/messages: transformers' greedy reply and counts; count_tokens the same prompt")

with client.messages.stream(**asked) as stream:
    kinds = [event.type for event in stream]
    final = stream.get_final_message()
assert final.content[0].text == want["greedy_text"] and final.stop_reason == "max_tokens", final
assert final.usage.output_tokens == n, final.usage
assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"], kinds
assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 1, kinds
print(f"/v1/messages streamed: {len(kinds)} events, the same reply")

# stop_sequences: the reply up to a piece of it, and the piece named
cut = want["greedy_text"][len(want["greedy_text"]) // 2:][:3]
s = client.messages.create(**asked | {"stop_sequences": [cut]})
assert s.stop_reason == "stop_sequence" and s.stop_sequence == cut, s
assert s.content[0].text == want["greedy_text"][:want["greedy_text"].index(cut)], s
print("stop_sequences: stopped at", repr(cut))

# tool_use and tool_result blocks are the OpenAI conversation they stand for.
tool = {"name": "get_weather", "description": "The weather in a city",
        "input_schema": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}
anthropic_messages = [{"role": "user", "content": "Weather in Paris and Oslo?"},
                      {"role": "assistant", "content": [
                          {"type": "tool_use", "id": f"call_{i}", "name": "get_weather", "input": {"city": city}}
                          for i, city in enumerate(["Paris", "Oslo"])]},
                      {"role": "user", "content": [
                          {"type": "tool_result", "tool_use_id": "call_0", "content": "18C and sunny"},
                          {"type": "tool_result", "tool_use_id": "call_1",
                           "content": [{"type": "text", "text": "4C and raining"}]}]}]
openai_messages = [anthropic_messages[0],
                   {"role": "assistant", "content": "", "tool_calls": [
                       {"id": f"call_{i}", "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}
                       for i, city in enumerate(["Paris", "Oslo"])]},
                   {"role": "tool", "content": "18C and sunny", "tool_call_id": "call_0"},
                   {"role": "tool", "content": "4C and raining", "tool_call_id": "call_1"}]
openai_tools = [{"type": "function", "function": {"name": tool["name"], "description": tool["description"],
                                                  "parameters": tool["input_schema"]}}]
a = client.messages.create(model="qwen", messages=anthropic_messages, tools=[tool], max_tokens=n,
                           extra_body={"temperature": 0})
oa = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
o = oa.chat.completions.create(model="qwen", messages=openai_messages, tools=openai_tools, temperature=0, max_tokens=n)
assert a.usage.input_tokens + a.usage.cache_read_input_tokens == o.usage.prompt_tokens, (a.usage, o.usage)
assert "".join(b.text for b in a.content if b.type == "text") == (o.choices[0].message.content or ""), (a, o)
print("tool_use and tool_result blocks: the OpenAI conversation's prompt and reply")

# A forced call: a tool_use block with the tool's input, stop_reason tool_use; streamed, the same block. (The city
# from a list: a random model's free text would run to max_tokens under the call's grammar.)
tool["input_schema"]["properties"]["city"]["enum"] = ["Paris", "Oslo"]
forced = dict(model="qwen", messages=[anthropic_messages[0]], tools=[tool], max_tokens=200,
              tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0})
f = client.messages.create(**forced)
uses = [b for b in f.content if b.type == "tool_use"]
assert len(uses) >= 1 and uses[0].name == "get_weather" and isinstance(uses[0].input, dict), f
assert f.stop_reason == "tool_use" and uses[0].input["city"] in ("Paris", "Oslo"), f
with client.messages.stream(**forced) as stream:
    streamed = stream.get_final_message()
streamed_uses = [b for b in streamed.content if b.type == "tool_use"]
assert [(u.name, u.input) for u in streamed_uses] == [(u.name, u.input) for u in uses], (streamed, f)
assert streamed.stop_reason == "tool_use", streamed
print("a forced call: tool_use blocks", [u.input for u in uses], "whole and streamed")

# A reasoning model's answer: its thinking block, then its text, as /v1/chat/completions splits them; streamed, the
# same blocks (each closed before the next opens).
think = dict(model="r1", messages=[{"role": "user", "content": user}], max_tokens=24, extra_body={"temperature": 0})
t = client.messages.create(**think)
o = oa.chat.completions.create(model="r1", messages=think["messages"], max_tokens=24, temperature=0)
thinking = [b.thinking for b in t.content if b.type == "thinking"]
assert thinking == [o.choices[0].message.reasoning_content] and thinking[0] and t.content[0].type == "thinking", (t, o)
assert "".join(b.text for b in t.content if b.type == "text") == (o.choices[0].message.content or ""), (t, o)
with client.messages.stream(**think) as stream:
    events = list(stream)
    streamed = stream.get_final_message()
blocks = lambda m: [(b.type, getattr(b, "thinking", None), getattr(b, "text", None)) for b in m.content]
assert blocks(streamed) == blocks(t), (streamed, t)
opened = [e.index for e in events if e.type == "content_block_start"]
closed = [e.index for e in events if e.type == "content_block_stop"]
assert opened == closed == list(range(len(t.content))), (opened, closed)
print("thinking blocks: the reasoning /v1/chat/completions splits off, whole and streamed:", [b[0] for b in blocks(t)])

def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode())
    try:
        return 200, json.loads(urllib.request.urlopen(req).read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
user_turn = [{"role": "user", "content": "x"}]
for body, words in (({"model": "qwen", "messages": user_turn}, "max_tokens"),
                    ({"model": "qwen", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, "'system'"),
                    ({"model": "qwen", "max_tokens": 5, "messages": [{"role": "user", "content": [
                        {"type": "image", "source": {"type": "url", "url": "http://x"}}]}]}, "text models"),
                    ({"model": "qwen", "max_tokens": 5, "messages": user_turn,
                      "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "built-in tool"),
                    ({"model": "qwen", "max_tokens": 5, "messages": user_turn, "container": "c"}, "'container'"),
                    ({"model": "nope", "max_tokens": 5, "messages": user_turn}, "nope")):
    status, r = post("/v1/messages", body)
    assert status in (400, 404) and r["type"] == "error" and words in r["error"]["message"], (body, status, r)
    assert r["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error"), r
try:
    client.messages.create(model="qwen", messages=user_turn, max_tokens=5, thinking={"type": "sometimes"})
    raise SystemExit("taken: thinking sometimes")
except anthropic.BadRequestError as err:
    assert "thinking" in err.body["error"]["message"], err.body
print("bad requests: Anthropic's errors, naming what is wrong")
PY
expect_lines 7 "^/v1/messages|^stop_sequences|^tool_use|^a forced|^thinking|^bad requests"
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"
echo "ok"
