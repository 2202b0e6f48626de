#!/usr/bin/env bash
# What a model is shown: `kiln apply-template` and kiln serve's
# POST /apply-template render real chat templates (llama.cpp's collection,
# tests/hf/fixtures/chat_templates) byte for byte as transformers'
# render_jinja_template did (expected.json); what a template raises reaches
# the user as an error (a 400 over HTTP) with the template's own message.
source "$(dirname "$0")/lib.sh"
FIX="$(cd "$(dirname "$0")/../hf/fixtures" && pwd)"
CORPUS="$FIX/chat_templates"
MODEL="$(python3 -c "import json; print(json.load(open('$FIX/chat/expected.json'))['served']['model'])")"

# expected NAME CONVERSATION GEN: transformers' text; writes the conversation to $WORK/messages.json.
expected() {
  python3 - "$CORPUS/expected.json" "$1" "$2" "$3" "$WORK" <<'PY'
import json, sys
e, name, conv, gen, work = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5]
c = e["conversations"][conv]
json.dump({"messages": c["messages"], "tools": c["tools"]}, open(f"{work}/messages.json", "w"))
row = next(r for r in e["renders"] if r["template"] == name and r["conversation"] == conv and r["add_generation_prompt"] == gen)
open(f"{work}/want.txt", "w", encoding="utf-8").write(row.get("text", "ERROR: " + row.get("error", "")))
PY
}

for case in "meta-llama-Llama-3.1-8B-Instruct.jinja tools 1" "Qwen-Qwen2.5-7B-Instruct.jinja multi_turn 1" \
            "mistralai-Mistral-Nemo-Instruct-2407.jinja tool_round 0" "microsoft-Phi-3.5-mini-instruct.jinja multi_line 1"; do
  set -- $case
  expected "$1" "$2" "$3"
  gen=(); [ "$3" = 1 ] || gen=(--no-generation-prompt)
  "$KILN" apply-template --template-file "$CORPUS/templates/$1" --messages "$WORK/messages.json" \
    --bos-token '<s>' --eos-token '</s>' "${gen[@]}" >"$WORK/got.txt" 2>"$OUT" || fail "apply-template $case"
  cmp -s "$WORK/got.txt" "$WORK/want.txt" || { diff "$WORK/want.txt" "$WORK/got.txt" >"$OUT"; fail "$case renders differently"; }
done
# Standard input, and a request body with "messages".
echo '[{"role": "user", "content": "Hi"}]' |
  "$KILN" apply-template --template-file "$CORPUS/templates/Qwen-Qwen2.5-7B-Instruct.jinja" --messages - >"$WORK/got.txt"
[ "$(cat "$WORK/got.txt")" = "$(printf '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant')" ] ||
  fail "Qwen2.5's default system turn: $(cat "$WORK/got.txt")"

# Errors: the template's own, a syntax error with its line, no template at all.
expected google-gemma-2-2b-it.jinja system_user 1
run 1 "$KILN" apply-template --template-file "$CORPUS/templates/google-gemma-2-2b-it.jinja" --messages "$WORK/messages.json"
expect "System role not supported"
printf 'line one\n{%% for m in messages %%}\n{{ m.content }\n' >"$WORK/broken.jinja"
run 1 "$KILN" apply-template --template-file "$WORK/broken.jinja" --messages "$WORK/messages.json"
expect "syntax error at line 3"
run 1 "$KILN" apply-template "hf:$FIX/$MODEL" --messages "$WORK/messages.json"
expect "has no chat template"

# A folder that ships its template (chat_template.jinja, as transformers 5 saves it) serves POST /apply-template.
cp -r "$FIX/$MODEL" "$WORK/model"
cp "$CORPUS/templates/Qwen-Qwen2.5-7B-Instruct.jinja" "$WORK/model/chat_template.jinja"
cp -r "$WORK/model" "$WORK/gemma"
cp "$CORPUS/templates/google-gemma-2-2b-it.jinja" "$WORK/gemma/chat_template.jinja"
port="$(free_port)"
"$KILN" serve --model m="hf:$WORK/model" --model g="hf:$WORK/gemma" --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
expected Qwen-Qwen2.5-7B-Instruct.jinja multi_turn 1
run 0 python3 - "$port" "$WORK" <<'PY'
import json, sys, urllib.error, urllib.request
port, work = sys.argv[1], sys.argv[2]
def post(body, path="apply-template"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/{path}", json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
messages = json.load(open(f"{work}/messages.json"))["messages"]
status, body = post({"model": "m", "messages": messages})
want = open(f"{work}/want.txt", encoding="utf-8").read()
assert status == 200 and body == {"prompt": want}, (status, body, want)
status, body = post({"model": "m", "messages": []})
assert status == 400 and "non-empty array" in body["error"]["message"], body
# What a template raises is a 400 with its own message, on the chat API too.
for path in ("apply-template", "v1/chat/completions"):
    status, body = post({"model": "g", "messages": messages}, path)
    assert status == 400 and "System role not supported" in body["error"]["message"], (path, status, body)
print("served /apply-template ok")
PY
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"

# A folder of tokenizer files alone tokenizes (no config.json needed).
mkdir "$WORK/tokenizer-only"
cp "$WORK/model/tokenizer.json" "$WORK/tokenizer-only/"
run 0 "$KILN" tokenize "hf:$WORK/model" --text "Hello there"
want="$(cat "$OUT")"
run 0 "$KILN" tokenize "hf:$WORK/tokenizer-only" --text "Hello there"
[ "$(cat "$OUT")" = "$want" ] || fail "a tokenizer-only folder tokenizes differently"
echo "ok"
