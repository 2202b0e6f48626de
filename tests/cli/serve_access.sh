#!/usr/bin/env bash
# Who may call kiln serve:
# - --api-key, --api-key-file and KILN_API_KEY: every request but the health
#   probes and the page needs one of the keys, as "Authorization: Bearer KEY"
#   (OpenAI's clients) or "x-api-key: KEY" (Anthropic's); without it, or with
#   another, a 401 in the endpoint's error shape; bad keys are refused at start;
# - --cors-origins: a browser's preflight is answered (before any key: it
#   carries none), and pages from the allowed origins get
#   Access-Control-Allow-Origin; by default those on this machine only.
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
FIX="$ROOT/tests/hf/fixtures"
printf 'second-key\n\n  third-key  \n' >"$WORK/keys"
port="$(free_port)"
KILN_API_KEY=env-key "$KILN" serve --model lm="hf:$FIX/llama-gqa" --api-key first-key --api-key-file "$WORK/keys" \
  --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
LOG="$WORK/serve.log" wait_for_server "$port" "$server"
grep -q "requests need an API key (4 accepted)" "$WORK/serve.log" || fail "the server did not say it needs keys"
run 0 python3 - "$port" <<'PY'
import json, sys, urllib.error, urllib.request
port = sys.argv[1]
def call(path, headers, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", None if body is None else json.dumps(body).encode(),
                                 headers)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
completion = {"model": "lm", "prompt": "hi", "max_tokens": 2}
for path in ("/health", "/v2/health/ready", "/"):
    status, _ = call(path, {})
    assert status == 200, (path, status)
for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "first-key"}, {"x-api-key": "first"}):
    status, body = call("/v1/completions", headers, completion)
    error = json.loads(body)["error"]
    assert status == 401 and error["type"] == "authentication_error" and "API key" in error["message"], (headers, body)
    status, _ = call("/v1/models", headers)
    assert status == 401, (headers, status)
status, body = call("/v1/messages", {}, {"model": "lm", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]})
assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error", body  # Anthropic's shape
for headers in ({"Authorization": "Bearer first-key"}, {"Authorization": "Bearer second-key"},
                {"x-api-key": "third-key"}, {"Authorization": "Bearer env-key"}):
    status, body = call("/v1/completions", headers, completion)
    assert status == 200 and json.loads(body)["choices"], (headers, body)
    status, _ = call("/metrics", headers)
    assert status == 200, (headers, status)
print("keys: 401 without one, 200 with any of the four, probes and the page open")
def preflight(origin):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", method="OPTIONS", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    with urllib.request.urlopen(req) as r:
        return r.status, r.headers
status, headers = preflight("http://localhost:5173")
assert status == 204 and headers["Access-Control-Allow-Origin"] == "http://localhost:5173", dict(headers)
assert "POST" in headers["Access-Control-Allow-Methods"], dict(headers)
assert headers["Access-Control-Allow-Headers"] == "authorization, content-type", dict(headers)
status, headers = preflight("https://elsewhere.example")
assert status == 204 and "Access-Control-Allow-Origin" not in headers, dict(headers)
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models", headers={"Origin": "http://127.0.0.1:3000",
                                                                             "Authorization": "Bearer first-key"})
with urllib.request.urlopen(req) as r:
    assert r.headers["Access-Control-Allow-Origin"] == "http://127.0.0.1:3000", dict(r.headers)
print("CORS: preflights answered, pages on this machine allowed, others not")
PY
expect "keys: 401 without one"
expect "CORS: preflights answered"
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"

# --cors-origins names the pages that may call; other pages get no Allow-Origin.
port="$(free_port)"
"$KILN" serve --model lm="hf:$FIX/llama-gqa" --cors-origins "https://app.example, https://other.example" \
  --port "$port" >"$WORK/serve2.log" 2>&1 &
server=$!
LOG="$WORK/serve2.log" wait_for_server "$port" "$server"
run 0 python3 - "$port" <<'PY'
import sys, urllib.request
port = sys.argv[1]
for origin, allowed in (("https://other.example", True), ("http://localhost:5173", False)):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models", headers={"Origin": origin})
    with urllib.request.urlopen(req) as r:
        assert (r.headers.get("Access-Control-Allow-Origin") == origin) == allowed, (origin, dict(r.headers))
print("CORS: the listed origins only")
PY
expect "the listed origins only"
kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly"

run 1 "$KILN" serve --model lm="hf:$FIX/llama-gqa" --api-key-file "$WORK/nothing-here" --port "$(free_port)"
expect "cannot read"
echo "ok"
