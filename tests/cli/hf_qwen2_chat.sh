#!/usr/bin/env bash
# A Qwen2.5-Instruct-style folder as transformers 5 saves it (Qwen2's real
# vocabulary with its NFC normalizer and empty BPE prefix, Qwen2.5's real
# chat template in chat_template.jinja, two eos ids in generation_config.json;
# tiny random weights: tests/hf/make_qwen2_folder.py, made once in a cache)
# serves /v1/chat/completions to the official openai client: the prompt is
# transformers' apply_chat_template, token for token, and the greedy reply
# is transformers' generate().
source "$(dirname "$0")/lib.sh"
require_oracle transformers tokenizers gguf sentencepiece google.protobuf openai
PY="$ORACLE_PY"
qwen2_chat_folder

# The prompt, through the command line: the same text and ids as transformers'.
python3 -c "import json; json.dump(json.load(open('$MODEL/expected.json'))['messages'], open('$WORK/messages.json', 'w'))"
"$KILN" apply-template "hf:$MODEL" --messages "$WORK/messages.json" >"$WORK/prompt.txt" || fail "apply-template"
python3 - "$MODEL/expected.json" "$WORK/prompt.txt" <<'PY' || fail "the rendered prompt differs from transformers'"
import json, sys
sys.exit(0 if open(sys.argv[2], encoding="utf-8").read() == json.load(open(sys.argv[1]))["prompt"] else 1)
PY
run 0 "$KILN" tokenize "hf:$MODEL" --json --file "$WORK/prompt.txt"
python3 - "$MODEL/expected.json" "$OUT" <<'PY' || fail "the prompt's ids differ from transformers'"
import json, sys
want = json.load(open(sys.argv[1]))["prompt_ids"]
sys.exit(0 if json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["ids"] == want else 1)
PY

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$KILN" serve --model qwen="hf:$MODEL" --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
run 0 "$PY" - "$port" "$MODEL/expected.json" <<'PY'
import json, sys
import openai
port, want = sys.argv[1], json.load(open(sys.argv[2]))
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
r = client.chat.completions.create(model="qwen", messages=want["messages"], temperature=0,
                                   max_tokens=len(want["greedy_ids"]))
assert r.usage.prompt_tokens == len(want["prompt_ids"]), (r.usage, len(want["prompt_ids"]))
assert r.usage.completion_tokens == len(want["greedy_ids"]), r.usage
assert r.choices[0].message.content == want["greedy_text"], (r.choices[0].message.content, want["greedy_text"])
print("openai client: transformers' prompt and greedy reply")
PY
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"
echo "ok"
