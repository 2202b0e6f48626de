#!/usr/bin/env bash
# kiln chat with tools: a tiny random Llama under Qwen2.5's real template
# (Hermes tool calls). --tool-choice naming a function makes every reply a
# call to it with arguments its parameters allow; /result answers the call
# and the model goes on; a message while a call awaits its result, and a
# tools file that is not a list of tools, are refused with a message;
# --response-format constrains every reply to a schema.
source "$(dirname "$0")/lib.sh"
FIX="$(cd "$(dirname "$0")/../hf/fixtures" && pwd)"
linked_copy "$FIX/gguf-tiny" "$WORK/model"
cp "$FIX/chat_templates/templates/Qwen-Qwen2.5-7B-Instruct.jinja" "$WORK/model/chat_template.jinja"
cat >"$WORK/tools.json" <<'JSON'
[{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
  "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false}}}]
JSON
printf 'Weather in Paris?\nAnd Rome?\n/result 21 degrees\n' >"$WORK/input.txt"
run 0 "$KILN" chat "hf:$WORK/model" --tools "$WORK/tools.json" --tool-choice get_weather --max-tokens 240 \
  --temperature 1 --seed 2 <"$WORK/input.txt"
[ "$(grep -c '^(tool call call_' "$OUT")" -eq 2 ] || fail "expected two tool calls (the reply, then the reply after /result)"
expect "the model awaits 1 tool result"
python3 - "$OUT" <<'PY' || fail "a call's arguments are not what the parameters allow"
import json, re, sys
calls = re.findall(r"^\(tool call call_\w+: get_weather\((.*)\); answer with /result TEXT\)$", open(sys.argv[1]).read(), re.M)
assert len(calls) == 2, calls
for c in calls:
    args = json.loads(c)
    assert set(args) == {"city", "unit"} and len(args["city"]) <= 8 and args["unit"] in ("celsius", "fahrenheit"), args
PY
# --response-format FILE (a JSON Schema): every reply is a document it
# validates; /format json then /format none switch the constraint.
cat >"$WORK/schema.json" <<'JSON'
{"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 1, "maximum": 5}},
 "required": ["ok", "n"], "additionalProperties": false}
JSON
printf 'Hi\nAgain\n/format json\n/format none\n' >"$WORK/input.txt"
run 0 "$KILN" chat "hf:$WORK/model" --response-format "$WORK/schema.json" --max-tokens 60 --temperature 1 --seed 3 \
  <"$WORK/input.txt"
expect "(replies constrained)"
expect "(replies unconstrained)"
python3 - "$OUT" <<'PY' || fail "a reply is not a document the schema validates"
import json, sys
text = open(sys.argv[1]).read().split("(replies constrained)")[0]
decoder, at, replies = json.JSONDecoder(), 0, 0
while text[at:].strip():
    at += len(text[at:]) - len(text[at:].lstrip())
    doc, at = decoder.raw_decode(text, at)
    assert set(doc) == {"ok", "n"} and isinstance(doc["ok"], bool) and doc["n"] in range(1, 6), doc
    replies += 1
assert replies == 2, replies
PY
echo '{"not": "a list"}' >"$WORK/bad.json"
printf '/tools %s\n' "$WORK/bad.json" | run 0 "$KILN" chat "hf:$WORK/model" --max-tokens 4
expect "must hold a JSON array of tools"
echo "ok"
