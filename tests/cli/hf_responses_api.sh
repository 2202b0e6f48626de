#!/usr/bin/env bash
# OpenAI's Responses API (/v1/responses) as the official openai client calls
# it (client.responses; the PyTorch 2 environment's, bench/torch2_venv.sh:
# required), on the Qwen2.5-style folder of cli.hf_qwen2_chat:
# - a greedy response, from a string or from message items, whole and
#   streamed (its events in order, numbered), is transformers' reply to the
#   folder's conversation, with its counts, cut at max_output_tokens as
#   incomplete;
# - function_call and function_call_output items are the OpenAI chat
#   conversation they stand for (the same prompt and reply), and a forced
#   call is a function_call item, whole and through the client's stream
#   helper;
# - a reasoning model's thinking (DeepSeek R1's template) is a reasoning
#   item;
# - what Kiln does not do is a 400 naming it.
source "$(dirname "$0")/lib.sh"
require_oracle transformers tokenizers gguf sentencepiece google.protobuf openai
PY="$ORACLE_PY"
qwen2_chat_folder
with_template "$WORK/r1" llama-cpp-deepseek-r1

port="$(free_port)"
"$KILN" serve --model qwen="hf:$MODEL" --model r1="hf:$WORK/r1" --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
run 0 "$PY" - "$port" "$MODEL" <<'PY'
import json, sys
import openai
port, folder = sys.argv[1], sys.argv[2]
want = json.load(open(f"{folder}/expected.json"))
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
n = len(want["greedy_ids"])
system, user = want["messages"][0]["content"], want["messages"][1]["content"]

r = client.responses.create(model="qwen", instructions=system, input=user, max_output_tokens=n, temperature=0)
assert r.object == "response" and r.id.startswith("resp_") and r.output_text == want["greedy_text"], r
assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", r
assert r.usage.input_tokens == len(want["prompt_ids"]) and r.usage.output_tokens == n, r.usage
assert [item.type for item in r.output] == ["message"] and r.output[0].content[0].type == "output_text", r
items = client.responses.create(model="qwen", input=[{"role": "developer", "content": system},
                                                     {"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": user}]}],
                                max_output_tokens=n, temperature=0)
assert items.output_text == want["greedy_text"], items
print("/v1/responses: transformers' greedy reply and counts, from a string and from items")

events = list(client.responses.create(model="qwen", instructions=system, input=user, max_output_tokens=n,
                                      temperature=0, stream=True))
kinds = [e.type for e in events]
assert kinds[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.output_text.delta"], kinds
assert kinds[-5:] == ["response.output_text.delta", "response.output_text.done", "response.content_part.done",
                      "response.output_item.done", "response.incomplete"], kinds
assert [e.sequence_number for e in events] == list(range(len(events))), events
assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == want["greedy_text"], events
assert events[-1].response.output_text == want["greedy_text"] and events[-1].response.usage.output_tokens == n
print(f"/v1/responses streamed: {len(events)} events in order, the same reply")

# function_call and function_call_output items are the OpenAI chat conversation they stand for.
tool = {"type": "function", "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}
conversation = [{"role": "user", "content": "Weather in Paris and Oslo?"}] + [
    {"type": "function_call", "call_id": f"call_{i}", "name": "get_weather", "arguments": json.dumps({"city": city})}
    for i, city in enumerate(["Paris", "Oslo"])] + [
    {"type": "function_call_output", "call_id": "call_0", "output": "18C and sunny"},
    {"type": "function_call_output", "call_id": "call_1", "output": "4C and raining"}]
chat_messages = [conversation[0],
                 {"role": "assistant", "content": "", "tool_calls": [
                     {"id": f"call_{i}", "type": "function",
                      "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}
                     for i, city in enumerate(["Paris", "Oslo"])]},
                 {"role": "tool", "content": "18C and sunny", "tool_call_id": "call_0"},
                 {"role": "tool", "content": "4C and raining", "tool_call_id": "call_1"}]
chat_tools = [{"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters")}}]
a = client.responses.create(model="qwen", input=conversation, tools=[tool], max_output_tokens=n, temperature=0)
o = client.chat.completions.create(model="qwen", messages=chat_messages, tools=chat_tools, max_tokens=n, temperature=0)
assert a.usage.input_tokens == o.usage.prompt_tokens and a.output_text == (o.choices[0].message.content or ""), (a, o)
print("function_call and function_call_output items: the chat conversation's prompt and reply")

# A forced call: a function_call item (the city from a list: a random model's free text would not end).
tool["parameters"]["properties"]["city"]["enum"] = ["Paris", "Oslo"]
forced = dict(model="qwen", input=conversation[:1], tools=[tool], tool_choice={"type": "function", "name": "get_weather"},
              max_output_tokens=200, temperature=0)
f = client.responses.create(**forced)
calls = [item for item in f.output if item.type == "function_call"]
assert f.status == "completed" and calls and calls[0].name == "get_weather", f
assert json.loads(calls[0].arguments)["city"] in ("Paris", "Oslo") and calls[0].call_id, f
with client.responses.stream(**forced) as stream:
    final = stream.get_final_response()
assert [(c.name, c.arguments) for c in final.output if c.type == "function_call"] == \
    [(c.name, c.arguments) for c in calls], (final, f)
print("a forced call: function_call items", [c.arguments for c in calls], "whole and streamed")

think = client.responses.create(model="r1", input=user, max_output_tokens=24, temperature=0)
chat = client.chat.completions.create(model="r1", messages=[{"role": "user", "content": user}], max_tokens=24,
                                      temperature=0)
assert think.output[0].type == "reasoning" and think.output[0].content[0].type == "reasoning_text", think
assert think.output[0].content[0].text == chat.choices[0].message.reasoning_content, (think, chat)
assert think.output_text == (chat.choices[0].message.content or ""), (think, chat)
# What Codex sends (storing nothing): include reasoning.encrypted_content, then the items back as input.
kept = client.responses.create(model="r1", input=user, max_output_tokens=24, temperature=0, store=False,
                               include=["reasoning.encrypted_content"])
assert kept.output[0].encrypted_content == think.output[0].content[0].text, kept
again = client.responses.create(model="r1", input=[{"role": "user", "content": user}] +
                                [item.model_dump(exclude={"content"}, exclude_none=True) if item.type == "reasoning"
                                 else item.model_dump(exclude_none=True) for item in kept.output] +
                                [{"role": "user", "content": "And?"}], max_output_tokens=4, temperature=0)
with_content = client.responses.create(model="r1", input=[{"role": "user", "content": user}] +
                                       [item.model_dump(exclude_none=True) for item in kept.output] +
                                       [{"role": "user", "content": "And?"}], max_output_tokens=4, temperature=0)
assert again.usage.input_tokens == with_content.usage.input_tokens, (again.usage, with_content.usage)
print("a reasoning item: the reasoning chat completions split off")

for asked, words in ((dict(input="x", previous_response_id="resp_1"), "keeps no responses"),
                     (dict(input="x", tools=[{"type": "web_search"}]), "built-in tool"),
                     (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]),
                      "text models"),
                     (dict(input="x", include=["message.output_text.logprobs"]), "include")):
    try:
        client.responses.create(model="qwen", **asked)
        raise SystemExit(f"taken: {asked}")
    except openai.BadRequestError as err:
        assert words in err.body["message"], (asked, err.body)
print("bad requests: 400s naming what Kiln does not do")

# The models, as the client lists and retrieves them
assert sorted(m.id for m in client.models.list()) == ["qwen", "r1"]
model = client.models.retrieve("r1")
assert model.id == "r1" and model.object == "model" and model.created > 0, model
try:
    client.models.retrieve("nope")
    raise SystemExit("retrieved a model not served")
except openai.NotFoundError:
    pass
print("models.list and models.retrieve")
PY
expect_lines 7 "^/v1/responses|^function_call|^a forced|^a reasoning|^bad requests|^models"
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"
echo "ok"
