#!/usr/bin/env bash
# kiln chat with tools: a tiny random Llama under Qwen2.5's real template
# (Hermes tool calls). --tool-choice naming a function makes every reply a
# call to it with arguments its parameters allow; /result answers the call
# and the model goes on; a message while a call awaits its result, and a
# tools file that is not a list of tools, are refused with a message.
source "$(dirname "$0")/lib.sh"
FIX="$(cd "$(dirname "$0")/../hf/fixtures" && pwd)"
mkdir "$WORK/model"
for f in "$FIX/gguf-tiny"/*; do ln -s "$f" "$WORK/model/"; done
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
echo '{"not": "a list"}' >"$WORK/bad.json"
printf '/tools %s\n' "$WORK/bad.json" | run 0 "$KILN" chat "hf:$WORK/model" --max-tokens 4
expect "must hold a JSON array of tools"
echo "ok"
