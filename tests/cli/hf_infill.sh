#!/usr/bin/env bash
# llama-server's /infill (what its editor plugins, llama.vscode and llama.vim, send) on a code model's kind
# (tests/hf/make_fixtures.py's fim-qwen2: Qwen2.5-Coder's fill-in-the-middle and repository marks), from its folder
# and from llama.cpp's GGUF of it: the prompt as llama-server builds it (other files' chunks, the prefix and suffix
# cut to its batch; tokens_evaluated), and transformers' greedy middle, whole and streamed. A model without the
# marks is a 400 that names them; a malformed chunk is a 400.
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
FIX="$ROOT/tests/hf/fixtures"
require_oracle gguf
SRC="$(made_once "$ROOT/scripts/llama_cpp_source.sh")" || fail "could not get llama.cpp's sources"
run 0 "$ORACLE_PY" "$ROOT/tests/hf/convert_fixture_to_gguf.py" "$SRC" llama-bpe "$FIX/fim-qwen2" --outtype f32 \
  --outfile "$WORK/fim.gguf"

port="$(free_port)"
"$KILN" serve --model coder="hf:$FIX/fim-qwen2" --model coder_gguf="gguf:$WORK/fim.gguf" --model plain="hf:$FIX/qwen2" \
  --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
run 0 python3 - "$port" "$FIX/fim-qwen2/expected.json" <<'PY'
import json, sys, urllib.error, urllib.request
port, want = sys.argv[1], json.load(open(sys.argv[2]))
def post(body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/infill", json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req) as r:
            return 200, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
for name in ("coder", "coder_gguf"):
    status, body = post(dict(want["request"], model=name))
    r = json.loads(body)
    assert status == 200 and r["content"] == want["greedy_text"], (name, r.get("content"), want["greedy_text"])
    assert r["tokens_evaluated"] == len(want["prompt_ids"]) and r["tokens_predicted"] == len(want["greedy_ids"]), r
    status, body = post(dict(want["request"], model=name, stream=True))
    events = [json.loads(l[6:]) for l in body.split("\n") if l.startswith("data: ")]
    assert status == 200 and "".join(e["content"] for e in events) == want["greedy_text"] and events[-1]["stop"], events
# As llama.vscode and llama.vim send it: their samplers (top_k, top_p, then llama.cpp's infill sampler; top_k 1 here,
# so transformers' greedy middle), n_indent 0, time limits far off, and the answer cut to response_fields.
plugin = {"n_indent": 0, "top_k": 1, "top_p": 0.99, "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True,
          "t_max_prompt_ms": 500, "t_max_predict_ms": 60000,
          "response_fields": ["content", "timings/prompt_n", "timings/predicted_n", "tokens_cached", "truncated"]}
status, body = post(dict(want["request"], model="coder_gguf", **plugin))
r = json.loads(body)
assert status == 200 and r["content"] == want["greedy_text"] and r["timings/predicted_n"] == len(want["greedy_ids"]), r
assert sorted(r) == ["content", "timings/predicted_n", "timings/prompt_n", "tokens_cached", "truncated"], r
status, body = post({"model": "plain", "input_prefix": "def f(", "input_suffix": ")\n"})
assert status == 400 and "fill-in-the-middle" in json.loads(body)["error"]["message"], body
status, body = post({"model": "coder", "input_prefix": "x", "input_extra": [{"text": 5}]})
assert status == 400 and "input_extra" in json.loads(body)["error"]["message"], body
print("infill ok")
PY
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"
echo "ok"
