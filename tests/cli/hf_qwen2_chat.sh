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

port="$(free_port)"
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
# /tokenize and /detokenize, as llama-server's and vLLM's clients call them, against transformers' tokenizer.
run 0 "$PY" - "$port" "$MODEL" <<'PY'
import json, sys, urllib.error, urllib.request
from transformers import AutoTokenizer
port, folder = sys.argv[1], sys.argv[2]
want = json.load(open(f"{folder}/expected.json"))
tok = AutoTokenizer.from_pretrained(folder)
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
text = "Héllo wörld, 12345 tokens<|im_end|> and\n  spaces 🙂"
ids = tok(text, add_special_tokens=False).input_ids
status, got = post("/tokenize", {"content": text})  # llama-server's: no model named
assert status == 200 and got["tokens"] == ids and got["count"] == len(ids) and got["max_model_len"] > 0, (got, ids)
status, got = post("/tokenize", {"model": "qwen", "prompt": text})  # vLLM's
assert status == 200 and got["tokens"] == tok(text).input_ids, got
status, got = post("/tokenize", {"model": "qwen", "messages": want["messages"]})  # a conversation, as vLLM renders it
assert status == 200 and got["tokens"] == want["prompt_ids"], got
status, got = post("/tokenize", {"content": text, "with_pieces": True})  # llama-server's: pieces that join to the text
pieces = [t["piece"] for t in got["tokens"]]
assert [t["id"] for t in got["tokens"]] == ids and "".join(pieces) == text and "<|im_end|>" in pieces, got
# parse_special false (llama-server's): <|im_end|> spelled out is text, as tokenizers' encode_special_tokens reads it
from tokenizers import Tokenizer
raw = Tokenizer.from_file(f"{folder}/tokenizer.json")
raw.encode_special_tokens = True
status, got = post("/tokenize", {"content": text, "parse_special": False})
as_text = raw.encode(text, add_special_tokens=False).ids
assert status == 200 and got["tokens"] == as_text != ids and tok.convert_tokens_to_ids("<|im_end|>") not in as_text, got
status, got = post("/detokenize", {"tokens": want["prompt_ids"]})
assert status == 200 and got["content"] == got["prompt"] == tok.decode(want["prompt_ids"]) == want["prompt"], got
for path, body, words in [("/tokenize", {"content": "x", "prompt": "y"}, "one of them"),
                          ("/tokenize", {"content": "x", "parse_special": 1}, "true or false"),
                          ("/tokenize", {"content": "x", "model": "nope"}, "unknown model 'nope'"),
                          ("/detokenize", {"tokens": [len(tok) + 5]}, "outside the tokenizer"),
                          ("/detokenize", {"tokens": [-1]}, "array of token ids")]:
    status, got = post(path, body)
    assert status in (400, 404) and words in got["error"]["message"], (path, body, status, got)
# lm-evaluation-harness's remote tokenizer: GET /tokenizer_info (vLLM's), then /tokenize and /detokenize as it calls them.
with urllib.request.urlopen(f"http://127.0.0.1:{port}/tokenizer_info") as r:
    info = json.loads(r.read())
assert info["eos_token"] == tok.eos_token and info["model_max_length"] > 0, info
assert info["chat_template"] == open(f"{folder}/chat_template.jinja", encoding="utf-8").read(), info["chat_template"][:80]
status, got = post("/tokenize", {"prompt": "test", "add_special_tokens": False})
assert status == 200 and got["tokens"] == tok("test", add_special_tokens=False).input_ids, got
status, got = post("/detokenize", {"tokens": got["tokens"]})
assert status == 200 and got["prompt"] == "test", got
print("/tokenize and /detokenize: transformers' ids and text")
# llama-server's GET /props, which its web UI reads first: the template, eos, context, and what /completion samples
# with where a request leaves it out (the folder's generation_config over llama-server's defaults).
with urllib.request.urlopen(f"http://127.0.0.1:{port}/props") as r:
    props = json.loads(r.read())
gen = json.load(open(f"{folder}/generation_config.json"))
params = props["default_generation_settings"]["params"]
want = {"temperature": gen.get("temperature", 0.8), "top_k": gen.get("top_k", 40), "top_p": gen.get("top_p", 0.95),
        "repeat_penalty": gen.get("repetition_penalty", 1.0)}
assert all(abs(params[k] - v) < 1e-9 for k, v in want.items()), (params, want)
assert props["chat_template"] == info["chat_template"] and props["eos_token"] == tok.eos_token, props
assert props["default_generation_settings"]["n_ctx"] == info["model_max_length"], props
assert props["model_alias"] == "qwen" and props["modalities"]["vision"] is False and props["total_slots"] > 0, props
print("/props: llama-server's shape, the folder's template and sampling defaults")
PY
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"
echo "ok"
