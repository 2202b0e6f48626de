#!/usr/bin/env bash
# Constrained decoding through kiln serve on a random-weight model (it knows
# nothing, so only the constraint can make its answers valid): llama-server's
# `grammar` field gives only what the grammar allows, at any temperature and
# seed, ending where the grammar ends; OpenAI's JSON mode
# (response_format json_object) answers with JSON objects, streamed or not.
source "$(dirname "$0")/lib.sh"
FIX="$(cd "$(dirname "$0")/../hf/fixtures" && pwd)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$KILN" serve --model m="hf:$FIX/qwen3" --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
run 0 python3 - "$port" <<'PY'
import json, sys, urllib.request
port = sys.argv[1]

def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return r.read().decode()

grammar = 'root ::= "{\\"ok\\": " ("true" | "false") "}"'
seen = set()
for seed in range(12):
    for temperature in (0.7, 1.5):
        r = json.loads(post("/v1/completions", {"model": "m", "prompt": "Answer:", "max_tokens": 32,
                                                "temperature": temperature, "seed": seed, "grammar": grammar}))
        c = r["choices"][0]
        assert c["text"] in ('{"ok": true}', '{"ok": false}'), c
        assert c["finish_reason"] == "stop", c
        seen.add(c["text"])
print(f"grammar: 24 answers, each one the grammar allows: {sorted(seen)}")

stopped = 0
for seed in range(10):
    body = {"model": "m", "prompt": "JSON:", "max_tokens": 48, "temperature": 1.0, "seed": seed,
            "response_format": {"type": "json_object"}}
    c = json.loads(post("/v1/completions", body))["choices"][0]
    if c["finish_reason"] == "stop":
        assert isinstance(json.loads(c["text"]), dict), c
        stopped += 1
    else:
        assert c["text"].startswith("{"), c
    streamed = ""
    for line in post("/v1/completions", dict(body, stream=True)).splitlines():
        if line.startswith("data: {"):
            streamed += json.loads(line[6:])["choices"][0]["text"]
    assert streamed == c["text"], (streamed, c["text"])
print(f"json_object: 10 answers, {stopped} complete objects that parse, streamed text equal to unstreamed")
PY
expect "grammar: 24 answers"
expect "json_object: 10 answers"
cat "$OUT"
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"
echo "ok"
