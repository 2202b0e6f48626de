#!/usr/bin/env python3
"""kiln serve against real HTTP clients on loopback (run by tests/cli/serve.sh
with two trained run directories). Every endpoint, every error code, a burst
of 200 concurrent requests that the server must batch, streamed and plain
completions that agree, and SIGTERM with requests in flight."""
import gzip, http.client, json, os, signal, socket, struct, subprocess, sys, threading, time, urllib.error, urllib.request

KILN, MLP, GPT, CLS = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
DATA = os.environ.get("KILN_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*extra, wait=True):
    port = free_port()
    proc = subprocess.Popen([KILN, "serve", "--model", f"mlp={MLP}", "--model", f"gpt={GPT}", "--model", f"cls={CLS}",
                             "--port", str(port),
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    if not wait:
        return proc, base
    for _ in range(300):
        try:
            if call("GET", base + "/health")[0] == 200:
                return proc, base
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    sys.exit("the server did not become ready: " + proc.stdout.read())


def call(method, url, body=None, raw=None, content_type="application/json"):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def gpt_batches(base):
    """(decode steps, steps of one completion) from /metrics, for the model gpt."""
    lines = call("GET", base + "/metrics")[1].splitlines()
    count = next(float(l.split()[-1]) for l in lines if l.startswith('kiln_batch_size_count{model="gpt"}'))
    ones = next(float(l.split()[-1]) for l in lines if l.startswith('kiln_batch_size_bucket{model="gpt",le="1"}'))
    return count, ones


def complete(base, req):
    """The text of a completion, plain or (stream: true) joined from its events."""
    status, body, _ = call("POST", base + "/v1/completions", req)
    if status != 200:
        return f"HTTP {status}"
    if not req.get("stream"):
        return json.loads(body)["choices"][0]["text"]
    events = [l[6:] for l in body.split("\n") if l.startswith("data: ")]
    return "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])


def images(n):
    raw = gzip.open(f"{DATA}/t10k-images-idx3-ubyte.gz").read()[16:16 + n * 784]
    labels = list(gzip.open(f"{DATA}/t10k-labels-idx1-ubyte.gz").read()[8:8 + n])
    return [[b / 255.0 for b in raw[i * 784:(i + 1) * 784]] for i in range(n)], labels


def infer(base, imgs, model="mlp"):
    body = {"inputs": [{"name": "images", "shape": [len(imgs), 1, 28, 28], "datatype": "FP32",
                        "data": [v for img in imgs for v in img]}]}
    return call("POST", f"{base}/v2/models/{model}/infer", body)


def binary_infer(base, imgs, length=None, tail=b"", **request):
    """KServe v2's binary tensor data extension, as Triton's clients send it: the pixels as little-endian
    FP32 bytes after a JSON header of Inference-Header-Content-Length bytes. (status, JSON, bytes after it)."""
    pixels = struct.pack(f"<{len(imgs) * 784}f", *[v for img in imgs for v in img]) + tail
    header = json.dumps({"inputs": [{"name": "images", "shape": [len(imgs), 784], "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(pixels) - len(tail)}}],
                         **request}).encode()
    req = urllib.request.Request(f"{base}/v2/models/mlp/infer", data=header + pixels, method="POST", headers={
        "Inference-Header-Content-Length": str(len(header)) if length is None else length})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            answer, n = r.read(), int(r.headers.get("Inference-Header-Content-Length", 0)) or None
            return r.status, json.loads(answer[:n]), answer[n:] if n else b""
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), b""


def in_parallel(fns):
    out = [None] * len(fns)
    def run(i):
        out[i] = fns[i]()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


imgs, truth = images(200)

# While models load (here: warm up), /health and the model endpoints answer 503 with a JSON error, then 200.
proc, base = start("--warmup", "20", "--max-batch", "128", wait=False)
seen, loading = [], None
for _ in range(600):
    try:
        status, body, headers = call("GET", base + "/health")
        seen.append(status)
        if status == 503 and loading is None:  # the first 503: far from the end of loading, so no race with it
            loading = (json.loads(body)["error"]["message"], headers.get("Retry-After"),
                       call("GET", base + "/v1/models")[0],
                       call("POST", base + "/v1/completions", {"model": "gpt", "prompt": "x"})[0])
        if status == 200:
            break
    except OSError:
        pass
    time.sleep(0.02)
check(seen and seen[0] == 503 and seen[-1] == 200 and set(seen) == {503, 200},
      f"/health answers 503 while the models load, then 200 ({seen.count(503)} x 503)")
check(seen[0] == 503 and loading[0] == "loading models" and loading[1] and loading[2:] == (503, 503),
      f"while loading: a JSON message, Retry-After, and 503 from /v1/models and /v1/completions {loading if seen[0] == 503 else ''}")
proc.send_signal(signal.SIGTERM)
log = proc.communicate(timeout=30)[0]
check(proc.returncode == 0 and "warming up mlp (20 batches)" in log, "--warmup says what it runs; SIGTERM exits 0")

# A model that cannot load ends the server with a message naming it (exit 1), never a half-working server.
bad = subprocess.run([KILN, "serve", "--model", "nope=/nonexistent/run", "--port", str(free_port())],
                     capture_output=True, text=True, timeout=60)
check(bad.returncode == 1 and "cannot load model nope from /nonexistent/run" in bad.stdout + bad.stderr,
      f"a model that cannot load ends the server with exit 1 and says which ({bad.returncode})")
proc, base = start("--max-body", "1MiB", "--max-batch", "128")

# --- every endpoint
status, body, _ = call("GET", base + "/health")
check(status == 200 and json.loads(body) == {"status": "ok"}, "GET /health is 200 {status: ok}")
check(call("GET", base + "/v2/health/ready")[0] == 200, "GET /v2/health/ready is 200")
models = {m["id"]: m["kind"] for m in json.loads(call("GET", base + "/v1/models")[1])["data"]}
check(models == {"mlp": "image-classifier", "gpt": "language-model", "cls": "text-classifier"},
      f"GET /v1/models lists all three: {models}")
check(json.loads(call("GET", base + "/models")[1])["data"] == json.loads(call("GET", base + "/v1/models")[1])["data"],
      "GET /models (llama-server's name) is /v1/models")
# Ollama's API: the language model listed (a run's GPT: no template to show), and its raw /api/generate is the
# greedy completion /v1/completions gives.
tags = json.loads(call("GET", base + "/api/tags")[1])["models"]
check([(t["name"], t["details"]["format"], t["details"]["family"]) for t in tags] == [("gpt", "kiln", "fortunes-gpt")],
      f"GET /api/tags lists the language model: {tags}")
prompt = "The fortune:"
status, body, _ = call("POST", base + "/api/generate", {"model": "gpt", "prompt": prompt, "raw": True, "stream": False,
                                                         "options": {"temperature": 0, "num_predict": 8}})
want = json.loads(call("POST", base + "/v1/completions", {"model": "gpt", "prompt": prompt, "temperature": 0,
                                                           "max_tokens": 8})[1])["choices"][0]["text"]
answer = json.loads(body)
check(status == 200 and answer["response"] == want and answer["done"] and answer["eval_count"] == 8,
      f"POST /api/generate raw on a run's GPT is its greedy completion: {answer.get('response')!r}")
status, body, _ = call("POST", base + "/api/chat", {"model": "gpt", "messages": [{"role": "user", "content": "x"}]})
check(status == 400 and "template" in json.loads(body)["error"], f"POST /api/chat without a template is a 400: {body}")
meta = json.loads(call("GET", base + "/v2/models/mlp")[1])
check(meta["inputs"][0]["shape"] == [-1, 1, 28, 28] and meta["outputs"][0]["shape"] == [-1, 10],
      "GET /v2/models/mlp gives the tensor metadata")
status, body, _ = infer(base, imgs[:100])
out = json.loads(body)["outputs"]
probs, labels = out[0]["data"], out[1]["data"]
check(status == 200 and out[0]["shape"] == [100, 10] and len(labels) == 100, "POST infer answers [100, 10]")
check(all(abs(sum(probs[i * 10:(i + 1) * 10]) - 1) < 1e-4 for i in range(100)), "each row of probabilities sums to 1")
accuracy = sum(CLASSES.index(l) == t for l, t in zip(labels, truth)) / 100
check(accuracy >= 0.6, f"the served model classifies real test images (accuracy {accuracy:.2f} >= 0.6)")

# --- a burst of 200 concurrent single-image requests: all right, and batched
results = in_parallel([lambda i=i: infer(base, [imgs[i]]) for i in range(200)])
check(all(r[0] == 200 for r in results), "200 concurrent requests all answered 200")
batched_labels = json.loads(infer(base, imgs[100:200])[1])["outputs"][1]["data"]
burst_labels = [json.loads(r[1])["outputs"][1]["data"][0] for r in results]
check(burst_labels[:100] == labels and burst_labels[100:] == batched_labels,
      "each concurrent answer equals the same image's answer in one big request")
metrics = call("GET", base + "/metrics")[1]
count = next(float(l.split()[-1]) for l in metrics.splitlines() if l.startswith('kiln_batch_size_count{model="mlp"}'))
ones = next(float(l.split()[-1]) for l in metrics.splitlines()
            if l.startswith('kiln_batch_size_bucket{model="mlp",le="1"}'))
check(ones < count, f"/metrics shows batches larger than 1 ({count - ones:.0f} of {count:.0f} batches)")
check('kiln_requests_total{endpoint="/v2/models/{name}/infer",code="200"}' in metrics and
      "kiln_request_duration_seconds_bucket" in metrics and "kiln_queue_wait_seconds_count" in metrics and
      'kiln_queue_depth{model="mlp"}' in metrics, "/metrics has requests, latency, queue wait and queue depth")

# --- the binary tensor data extension: bytes in, and bytes out where asked
status, head, tail = binary_infer(base, imgs[:5], parameters={"binary_data_output": True})
as_json = json.loads(infer(base, imgs[:5])[1])["outputs"]
sizes = [o["parameters"]["binary_data_size"] for o in head["outputs"]] if status == 200 else [0, 0]
bin_probs = struct.unpack(f"<{sizes[0] // 4}f", tail[:sizes[0]])
bin_labels, at = [], sizes[0]
while at + 4 <= len(tail):
    length = struct.unpack_from("<I", tail, at)[0]
    bin_labels.append(tail[at + 4:at + 4 + length].decode())
    at += 4 + length
check(status == 200 and sizes == [200, len(tail) - 200] and bin_labels == as_json[1]["data"] and
      all(abs(a - b) < 1e-6 for a, b in zip(bin_probs, as_json[0]["data"])) and len(bin_probs) == 50,
      f"binary tensor data in and out: the same answers as JSON ({status}, {bin_labels})")
status, head, tail = binary_infer(base, imgs[:2], outputs=[{"name": "label"}])
check(status == 200 and [o["name"] for o in head["outputs"]] == ["label"] and not tail and
      head["outputs"][0]["data"] == as_json[1]["data"][:2], "binary in, JSON out, only the output asked for")
check(json.loads(call("GET", base + "/v2")[1])["extensions"] == ["binary_tensor_data"] and
      call("GET", base + "/v2/models/mlp/ready")[0] == 200 and call("GET", base + "/v2/models/nope/ready")[0] == 404,
      "GET /v2 names the extension; /v2/models/{name}/ready is 200, or 404 for a model not served")
nan_image = [float("nan")] + imgs[0][1:]
for what, kwargs in [("header length past the body", {"length": "999999"}), ("header length not a number",
                     {"length": "12abc"}), ("more bytes than binary_data_size", {"tail": b"\0" * 4}),
                     ("an unknown output", {"outputs": [{"name": "logits"}]})]:
    status, head, _ = binary_infer(base, imgs[:1], **kwargs)
    check(status == 400 and "message" in head["error"], f"binary data, {what}: {status} (want 400)")
status, head, _ = binary_infer(base, [nan_image])
check(status == 400 and "NaN" in head["error"]["message"], f"binary data with a NaN pixel: {status} (want 400)")

# `curl -d` labels a body as a form: it is still read as JSON, past the 8 KiB cpp-httplib allows a form
form_body = {"inputs": [{"name": "images", "shape": [3, 784], "datatype": "FP32", "data": sum(imgs[:3], [])}]}
status, body, _ = call("POST", base + "/v2/models/mlp/infer", form_body, content_type="application/x-www-form-urlencoded")
check(status == 200 and json.loads(body)["outputs"][1]["data"] == as_json[1]["data"][:3],
      f"a {len(json.dumps(form_body)) // 1024} KiB JSON body labelled as a form is answered ({status})")
status, body, _ = call("POST", base + "/v1/classify", None, b"--b\r\n\r\nx\r\n--b--\r\n",
                       content_type="multipart/form-data; boundary=b")
check(status == 400 and "multipart" in json.loads(body)["error"]["message"], f"a multipart form: {status} (want 400)")

# --- text classification: one text or several, labels with probabilities
status, body, _ = call("POST", base + "/v1/classify", {"model": "cls", "input": "The compiler crashed again."})
one = json.loads(body)["data"]
check(status == 200 and len(one) == 1 and abs(sum(one[0]["probabilities"].values()) - 1) < 1e-4 and
      one[0]["label"] == max(one[0]["probabilities"], key=one[0]["probabilities"].get),
      f"POST /v1/classify with one text: {one[0]['label']}")
texts = ["The compiler crashed again.", "Congress passed the bill.", "Love is blind."]
many = json.loads(call("POST", base + "/v1/classify", {"model": "cls", "input": texts})[1])["data"]
same = all(abs(many[0]["probabilities"][k] - v) < 1e-5 for k, v in one[0]["probabilities"].items())
check([d["index"] for d in many] == [0, 1, 2] and same and
      set(many[0]["probabilities"]) >= {"computers", "politics", "people"},
      "POST /v1/classify with three texts: the first equals the single answer; the classes are the fortunes files")
# Texts of different lengths (a word, a sentence, a paragraph cut at the context) sent at once are batched
# together, each padded to the batch's longest, and each answered as when sent alone.
lengths = ["Love.", "The compiler crashed again, and the backup tape was blank.",
           " ".join(["Never trust a computer you cannot throw out of a window."] * 12)]
alone = [json.loads(call("POST", base + "/v1/classify", {"model": "cls", "input": t})[1])["data"][0] for t in lengths]
before = call("GET", base + "/metrics")[1]
mixed = in_parallel([lambda i=i: call("POST", base + "/v1/classify", {"model": "cls", "input": lengths[i % 3]})
                     for i in range(60)])
after = call("GET", base + "/metrics")[1]
def cls_batches(metrics):
    lines = metrics.splitlines()
    return (next(float(l.split()[-1]) for l in lines if l.startswith('kiln_batch_size_count{model="cls"}')),
            next(float(l.split()[-1]) for l in lines if l.startswith('kiln_batch_size_sum{model="cls"}')))
(count0, rows0), (count1, rows1) = cls_batches(before), cls_batches(after)
answers = [json.loads(r[1])["data"][0] if r[0] == 200 else None for r in mixed]
check(all(a is not None and all(abs(a["probabilities"][k] - v) < 1e-5 for k, v in alone[i % 3]["probabilities"].items())
          for i, a in enumerate(answers)) and (rows1 - rows0) > (count1 - count0),
      f"60 concurrent texts of three lengths: each answered as alone, in batches of {(rows1 - rows0) / max(1, count1 - count0):.1f} texts on average")

# --- --batch-invariant: every answer has the bits it has alone, however it was batched. In the default
# mode a burst's batched answers differ from the lone ones in their last digits (counted and shown).
def burst_mismatches(server):
    probs = lambda r: json.loads(r[1])["data"][0]["probabilities"] if r[0] == 200 else None
    lone = [probs(call("POST", server + "/v1/classify", {"model": "cls", "input": t})) for t in lengths]
    mixed = in_parallel([lambda i=i: call("POST", server + "/v1/classify", {"model": "cls", "input": lengths[i % 3]})
                         for i in range(60)])
    return sum(probs(r) != lone[i % 3] for i, r in enumerate(mixed))
def logprob_mismatches(server):
    reqs = [{"model": "gpt", "prompt": p, "max_tokens": 10, "temperature": 0, "logprobs": 2}
            for p in ["The ", "A fortune: ", "Never trust ", "Love is "] * 3]
    lp = lambda r: json.loads(r[1])["choices"][0]["logprobs"]["token_logprobs"] if r[0] == 200 else None
    lone = [lp(call("POST", server + "/v1/completions", q)) for q in reqs]
    together = in_parallel([lambda q=q: call("POST", server + "/v1/completions", q) for q in reqs])
    return sum(lp(r) != a for r, a in zip(together, lone))
default_texts, default_completions = burst_mismatches(base), logprob_mismatches(base)
proc_inv, base_inv = start("--batch-invariant", "--max-batch", "128")
check(burst_mismatches(base_inv) == 0 and logprob_mismatches(base_inv) == 0,
      f"--batch-invariant: 60 concurrent texts and 12 concurrent completions' log-probabilities each have the bits "
      f"they have alone (the default mode: {default_texts} of 60 texts, {default_completions} of 12 completions differ)")
proc_inv.send_signal(signal.SIGTERM)
proc_inv.wait(timeout=30)
refused = subprocess.run([KILN, "serve", "--model", f"gpt={GPT}", "--batch-invariant", "--device", "cuda",
                          "--port", str(free_port())], capture_output=True, text=True, timeout=60)
check(refused.returncode != 0 and "--batch-invariant runs on the CPU" in refused.stdout + refused.stderr,
      "--batch-invariant with --device cuda is refused, saying why")

# --- --precision bf16: the same models under bf16 autocast answer as fp32 does, within bf16 rounding
# (on a CPU without bf16 instructions the server says so and serves fp32); on one CPU thread (--threads 1)
proc16, base16 = start("--precision", "bf16", "--max-batch", "128", "--threads", "1")
many16 = json.loads(call("POST", base16 + "/v1/classify", {"model": "cls", "input": texts})[1])["data"]
out16 = json.loads(infer(base16, imgs[:100])[1])["outputs"]
completion16 = json.loads(call("POST", base16 + "/v1/completions",
                               {"model": "gpt", "prompt": "The ", "max_tokens": 8})[1])
proc16.send_signal(signal.SIGTERM)
log16 = proc16.communicate(timeout=30)[0]
close = all(abs(a["probabilities"][k] - v) < 0.02 for a, b in zip(many16, many) for k, v in b["probabilities"].items())
close_images = all(abs(a - b) < 0.02 for a, b in zip(out16[0]["data"], probs))
check(close and close_images and completion16["usage"]["completion_tokens"] == 8 and
      ("bf16) from" in log16 or "serving in fp32" in log16),
      "--precision bf16 serves texts, images and completions within 0.02 of fp32's probabilities")
check("models run on 1 CPU thread" in log16, "--threads 1 runs the models on one CPU thread")

# --- completions: plain, streamed (the same text for the same seed), stop strings
req = {"model": "gpt", "prompt": "The ", "max_tokens": 24, "temperature": 0.9, "top_k": 40, "seed": 7}
status, body, _ = call("POST", base + "/v1/completions", req)
plain = json.loads(body)
text = plain["choices"][0]["text"]
check(status == 200 and plain["usage"]["completion_tokens"] > 0 and text, f"POST /v1/completions: {text!r}")
status, body, headers = call("POST", base + "/v1/completions", dict(req, stream=True))
events = [l[6:] for l in body.split("\n") if l.startswith("data: ")]
streamed = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
check(headers.get("Content-Type", "").startswith("text/event-stream") and events[-1] == "[DONE]" and len(events) > 3,
      f"stream: true sends server-sent events ({len(events)} events) ending in [DONE]")
check(streamed == text, "the streamed pieces make the same text as the plain completion")
if len(text) > 4:
    stop = text[2:4]
    cut = json.loads(call("POST", base + "/v1/completions", dict(req, stop=[stop]))[1])["choices"][0]
    check(cut["text"] == text[:text.find(stop)] and cut["finish_reason"] == "stop", "a stop string ends the text")
# temperature 0 is greedy, as OpenAI's clients and evaluation harnesses mean it: the seed changes nothing
greedy = [complete(base, dict(req, temperature=0, seed=seed)) for seed in (1, 2)]
check(greedy[0] == greedy[1] and greedy[0] and not greedy[0].startswith("HTTP"),
      f"temperature 0 is greedy: the same text for any seed ({greedy[0]!r})")
# n choices: the i-th is what one request with seed + i gives; streamed, the events carry each choice's index
status, body, _ = call("POST", base + "/v1/completions", dict(req, n=3))
answer = json.loads(body)
singles = [complete(base, dict(req, seed=req["seed"] + i)) for i in range(3)]
check(status == 200 and [c["index"] for c in answer["choices"]] == [0, 1, 2] and
      [c["text"] for c in answer["choices"]] == singles and len(set(singles)) > 1 and
      answer["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"] and
      answer["usage"]["completion_tokens"] == sum(json.loads(call("POST", base + "/v1/completions", dict(
          req, seed=req["seed"] + i))[1])["usage"]["completion_tokens"] for i in range(3)),
      f"n: 3 answers three choices, each the completion of seed + index, their usage summed ({status})")
status, body, _ = call("POST", base + "/v1/completions", dict(req, n=3, stream=True,
                                                               stream_options={"include_usage": True}))
events = [json.loads(l[6:]) for l in body.split("\n") if l.startswith("data: ") and l != "data: [DONE]"]
by_index = ["".join(c["text"] for e in events for c in e["choices"] if c["index"] == i) for i in range(3)]
finishes = [c["index"] for e in events for c in e["choices"] if c["finish_reason"]]
check(status == 200 and by_index == singles and sorted(finishes) == [0, 1, 2] and
      events[-1]["usage"] == answer["usage"] and body.rstrip().endswith("data: [DONE]"),
      "n: 3 streamed: each index's events make its choice's text, each finishes once, then one usage")
# llama-server's /chat/completions (no /v1) is the OpenAI endpoint
chat_req = {"model": "gpt", "messages": [{"role": "user", "content": "The "}], "max_tokens": 6, "temperature": 0}
status, body, _ = call("POST", base + "/chat/completions", chat_req)
status_v1, body_v1, _ = call("POST", base + "/v1/chat/completions", chat_req)
check(status == status_v1 and json.loads(body).get("choices") == json.loads(body_v1).get("choices") and
      json.loads(body).get("error") == json.loads(body_v1).get("error"),
      f"POST /chat/completions answers as /v1/chat/completions ({status})")
# llama-server's own /completion (its README's first example): the text /v1/completions gives, greedy; streamed
# as {"content", "stop": false} events and a last one with the stats, without [DONE]; stop_type as it says
lreq = {"prompt": "The ", "n_predict": 12, "temperature": 0}
status, body, _ = call("POST", base + "/completion", lreq)
answer = json.loads(body)
openai_answer = json.loads(call("POST", base + "/v1/completions", dict(req, max_tokens=12, temperature=0))[1])
check(status == 200 and answer["content"] == openai_answer["choices"][0]["text"] and answer["stop"] is True and
      answer["tokens_predicted"] == openai_answer["usage"]["completion_tokens"] and answer["model"] == "gpt" and
      answer["stop_type"] == {"length": "limit", "stop": "eos"}[openai_answer["choices"][0]["finish_reason"]],
      f"POST /completion: /v1/completions' greedy text ({answer.get('content')!r}, {answer.get('stop_type')})")
status, body, _ = call("POST", base + "/completion", dict(lreq, stream=True))
events = [json.loads(l[6:]) for l in body.split("\n") if l.startswith("data: ")]
check(status == 200 and "".join(e["content"] for e in events) == answer["content"] and
      [e["stop"] for e in events] == [False] * (len(events) - 1) + [True] and
      events[-1]["stop_type"] == answer["stop_type"] and "[DONE]" not in body,
      f"POST /completion streamed: {len(events)} events, the last with the stats, no [DONE]")
if len(answer["content"]) > 4:
    word = answer["content"][2:4]
    cut = json.loads(call("POST", base + "/completions", dict(lreq, stop=[word]))[1])  # the alias
    check(cut["content"] == answer["content"][:answer["content"].find(word)] and cut["stop_type"] == "word" and
          cut["stopping_word"] == word, f"a stop word: stop_type word, stopping_word {cut.get('stopping_word')!r}")
# n_probs: llama-server's completion_probabilities, each token's as /v1/completions' logprobs give it, whole and streamed
probs = json.loads(call("POST", base + "/completion", dict(lreq, n_probs=3))[1])["completion_probabilities"]
openai_lp = json.loads(call("POST", base + "/v1/completions", dict(req, max_tokens=12, temperature=0, logprobs=3))[1])
openai_lp = openai_lp["choices"][0]["logprobs"]
_, body, _ = call("POST", base + "/completion", dict(lreq, n_probs=3, stream=True))
streamed = [p for l in body.split("\n") if l.startswith("data: ")
            for p in json.loads(l[6:]).get("completion_probabilities", [])]
check([p["token"] for p in probs] == openai_lp["tokens"] and
      all(abs(p["logprob"] - w) < 1e-5 for p, w in zip(probs, openai_lp["token_logprobs"])) and
      all(len(p["top_logprobs"]) == 3 and p["top_logprobs"][0]["id"] == p["id"] and
          p["bytes"] == list(p["token"].encode()) for p in probs) and
      [p["id"] for p in streamed] == [p["id"] for p in probs],
      f"n_probs 3: completion_probabilities are /v1/completions' logprobs ({len(probs)} tokens), streamed too")
status, body, _ = call("POST", base + "/completion", dict(lreq, mirostat=2))
check(status == 400 and "mirostat" in json.loads(body)["error"]["message"], f"mirostat 2 is a 400 naming it ({status})")
# /tokenize and /detokenize (llama-server's and vLLM's): the GPT's tokens; with its special token (the end of
# text, first in every training document) when asked; a classifier has none to show
status, body, _ = call("POST", base + "/tokenize", {"content": "The cat sat."})
tokens = json.loads(body)["tokens"]
status2, body2, _ = call("POST", base + "/tokenize", {"model": "gpt", "prompt": "The cat sat."})
status3, body3, _ = call("POST", base + "/detokenize", {"tokens": tokens})
pieces = json.loads(call("POST", base + "/tokenize", {"content": "The cat sat.", "with_pieces": True})[1])["tokens"]
check(status == status2 == status3 == 200 and len(tokens) > 1 and json.loads(body2)["tokens"][1:] == tokens and
      json.loads(body2)["count"] == len(tokens) + 1 and json.loads(body3)["content"] == "The cat sat." and
      [p["id"] for p in pieces] == tokens and "".join(p["piece"] for p in pieces) == "The cat sat.",
      f"/tokenize and /detokenize: the GPT's {len(tokens)} tokens and back, the special token added when asked")
status, body, _ = call("GET", base + "/tokenizer_info?model=gpt")
check(status == 400 and "no tokenizer to describe" in json.loads(body)["error"]["message"],
      f"GET /tokenizer_info of a fortunes-gpt run is a 400 saying so ({status})")
status, body, _ = call("POST", base + "/tokenize", {"model": "cls", "content": "x"})
check(status == 400 and "not a language model" in json.loads(body)["error"]["message"],
      f"/tokenize of a classifier is a 400 ({status})")
# a batch of prompts (OpenAI's array of strings), with n 2: prompt i's j-th choice at index 2 i + j, each what one
# request with seed + j gives; the usage counts each prompt once
batch = ["The ", "A fortune: "]
status, body, _ = call("POST", base + "/v1/completions", dict(req, prompt=batch, n=2))
answer = json.loads(body)
one = [[json.loads(call("POST", base + "/v1/completions", dict(req, prompt=p, seed=req["seed"] + j))[1])
        for j in range(2)] for p in batch]
check(status == 200 and [c["index"] for c in answer["choices"]] == [0, 1, 2, 3] and
      [c["text"] for c in answer["choices"]] == [o["choices"][0]["text"] for row in one for o in row] and
      answer["usage"]["prompt_tokens"] == sum(row[0]["usage"]["prompt_tokens"] for row in one) and
      answer["usage"]["completion_tokens"] == sum(o["usage"]["completion_tokens"] for row in one for o in row),
      f"a batch of 2 prompts with n 2: four choices in order, each its single request's, the usage summed ({status})")
status, body, _ = call("POST", base + "/v1/completions", dict(req, n=129))
check(status == 400 and "n must be in [1, 128]" in json.loads(body)["error"]["message"], f"n: 129 is a 400 ({status})")
metrics = call("GET", base + "/metrics")[1]
check('kiln_tokens_generated_total{model="gpt"}' in metrics, "/metrics counts generated tokens")

# --- continuous batching: 16 completions at once (half streamed) decode together, each as it would alone
reqs = [dict(req, seed=seed, max_tokens=20 + seed, stream=seed % 2 == 1) for seed in range(1, 17)]
alone = [complete(base, dict(q, stream=False)) for q in reqs]
steps, ones = gpt_batches(base)
together = in_parallel([lambda q=q: complete(base, q) for q in reqs])
steps2, ones2 = gpt_batches(base)
check(together == alone and not any(t.startswith("HTTP") for t in alone) and sum(map(bool, alone)) >= 12,
      "16 concurrent completions of different lengths each give the text they give alone " +
      str([(a, t) for a, t in zip(alone, together) if a != t]))
check((steps2 - steps) - (ones2 - ones) > 0,
      f"their decode steps ran several at once ({(steps2 - steps) - (ones2 - ones):.0f} of {steps2 - steps:.0f} steps)")
long_req = {"model": "gpt", "prompt": "The ", "max_tokens": 1000, "ignore_eos": True}
start_time = time.time()
long_done = json.loads(call("POST", base + "/v1/completions", long_req)[1])
long_seconds = time.time() - start_time
check(long_done["usage"]["completion_tokens"] == 1000 and long_done["choices"][0]["finish_reason"] == "length",
      f"ignore_eos runs to max_tokens ({long_seconds:.2f} s for 1000 tokens)")

# --- errors
for what, args, want in [
        ("malformed JSON", ("POST", base + "/v1/completions", None, b"{not json"), 400),
        ("missing field", ("POST", base + "/v1/completions", {"prompt": "x"}), 400),
        ("wrong type", ("POST", base + "/v1/completions", {"model": "gpt", "max_tokens": "ten"}), 400),
        ("bad shape", ("POST", base + "/v2/models/mlp/infer",
                       {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}), 400),
        ("wrong model kind", ("POST", base + "/v2/models/gpt/infer", {"inputs": []}), 400),
        ("classify with an image model", ("POST", base + "/v1/classify", {"model": "mlp", "input": "x"}), 400),
        ("classify without input", ("POST", base + "/v1/classify", {"model": "cls"}), 400),
        ("unknown model", ("POST", base + "/v1/completions", {"model": "nope", "prompt": "x"}), 404),
        ("unknown model metadata", ("GET", base + "/v2/models/nope"), 404),
        ("unknown path", ("GET", base + "/v3/whatever"), 404),
        ("body over --max-body", ("POST", base + "/v1/completions", None, b"x" * (2 << 20)), 413)]:
    status, body, _ = call(*args)
    check(status == want and "message" in json.loads(body)["error"], f"{what}: {status} (want {want})")
check(call("GET", base + "/health")[0] == 200, "after all that, the server still answers")
proc.send_signal(signal.SIGTERM)
check(proc.wait(timeout=10) == 0, "SIGTERM on an idle server exits 0")

# --- overload: a queue of one and a long batching delay give 503 with Retry-After, and the timeout 504
proc, base = start("--max-queue", "1", "--max-batch", "2", "--max-delay-us", "300000", "--request-timeout-ms", "150")
results = in_parallel([lambda i=i: infer(base, [imgs[i]]) for i in range(12)])
codes = sorted(r[0] for r in results)
check(any(r[0] == 503 and r[2].get("Retry-After") for r in results), f"a full queue answers 503 + Retry-After {codes}")
check(504 in codes, "a request not answered within --request-timeout-ms gets 504")
# A completion past the timeout gets 504 and leaves the queue (of one): the next one is served.
# Three times the tokens, to outlast the timeout with a wide margin on a fast
# CPU (1000 tokens took 0.5 s here once small ops were vectorised).
check(3 * long_seconds > 0.3, "a 3000-token completion takes longer than the 150 ms timeout below")
if 3 * long_seconds > 0.3:
    status = call("POST", base + "/v1/completions", dict(long_req, max_tokens=3000))[0]
    check(status == 504, f"a completion not finished within --request-timeout-ms gets 504 ({status})")
    time.sleep(0.1)
    check(call("POST", base + "/v1/completions", dict(req, max_tokens=4))[0] == 200,
          "the timed-out completion left the queue: the next one is answered")
# A stream whose client goes away is dropped too. The stream asks for 4096 tokens; the client reads the
# first bytes and hangs up. While the stream holds the queue (of one) a new completion gets 503; once it
# has left, the next one is admitted: answered, or (on a loaded machine) 504 after this server's 150 ms
# timeout. Tokens generated meanwhile (from /metrics) show that the stream was cut short, not run to
# its end: load slows both, so the check does not depend on timing.
def tokens_generated():
    return next(float(l.split()[-1]) for l in call("GET", base + "/metrics")[1].splitlines()
                if l.startswith('kiln_tokens_generated_total{model="gpt"}'))
tokens_before = tokens_generated()
port = int(base.rsplit(":", 1)[1])
body = json.dumps(dict(long_req, max_tokens=4096, stream=True)).encode()
for attempt in range(10):  # a stream that cannot start within the 150 ms timeout (a loaded machine) gets 504: retry
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body)
    first = conn.recv(4096)
    conn.close()
    if b"text/event-stream" in first:
        break
    time.sleep(0.2)
deadline, status = time.time() + 60, 503
while status == 503 and time.time() < deadline:
    time.sleep(0.05)
    status = call("POST", base + "/v1/completions", dict(req, max_tokens=4))[0]
tokens = tokens_generated() - tokens_before
check(b"text/event-stream" in first and status in (200, 504) and tokens < 4096,
      f"a stream whose client hung up leaves the queue: the next completion is admitted ({status}) after "
      f"{tokens:.0f} tokens, not the 4096 asked for (started: {first[:15]!r})")
proc.send_signal(signal.SIGTERM)
proc.wait(timeout=10)

# --- SIGTERM with requests in flight: all answered, then the server exits
proc, base = start("--max-delay-us", "300000", "--max-batch", "64")
box = {}
threading.Timer(0.1, lambda: proc.send_signal(signal.SIGTERM)).start()
in_flight = [lambda: call("POST", base + "/v1/completions", dict(long_req, max_tokens=300)),
             lambda: complete(base, dict(long_req, max_tokens=300, stream=True))]
results = in_parallel([lambda i=i: infer(base, [imgs[i]]) for i in range(8)] + in_flight)
plain_done, streamed_done = results[8], results[9]
results = results[:8]
check(all(r[0] == 200 for r in results) and
      [json.loads(r[1])["outputs"][1]["data"][0] for r in results] == labels[:8],
      "requests in flight at SIGTERM are all answered, correctly")
check(plain_done[0] == 200 and json.loads(plain_done[1])["usage"]["completion_tokens"] == 300 and
      streamed_done == json.loads(plain_done[1])["choices"][0]["text"],
      "completions in flight at SIGTERM (plain and streamed) run to their end")
check(proc.wait(timeout=10) == 0, "the server exits 0 after SIGTERM")
try:
    call("GET", base + "/health")
    check(False, "after exit, new connections are refused")
except OSError:
    check(True, "after exit, new connections are refused")

# --- SIGTERM while a stream still waits for its first token, queued behind a running completion
# (--max-batch 1): a stopping server must wait for streams from their arrival, not their first token
reference = json.loads(plain_done[1])["choices"][0]["text"]  # the same 300 tokens, whole
proc, base = start("--max-batch", "1")
def gpt_metric(name):
    return next((float(l.split()[-1]) for l in call("GET", base + "/metrics")[1].splitlines()
                 if l.startswith(name + '{model="gpt"}')), 0.0)
def terminate_once_the_stream_waits():
    deadline = time.time() + 30
    while time.time() < deadline and not (gpt_metric("kiln_tokens_generated_total") > 0 and
                                          gpt_metric("kiln_queue_depth") >= 1):
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
def stream():
    time.sleep(0.05)  # after the plain completion has the one place
    try:
        return complete(base, dict(long_req, max_tokens=300, stream=True))
    except http.client.HTTPException as e:
        return f"cut off: {e!r}"
threading.Thread(target=terminate_once_the_stream_waits).start()
plain_done, streamed_done = in_parallel([
    lambda: call("POST", base + "/v1/completions", dict(long_req, max_tokens=1000)), stream])
check(plain_done[0] == 200 and streamed_done == reference and proc.wait(timeout=10) == 0,
      f"a stream still queued at SIGTERM runs to its end ({streamed_done[:40]!r})")

sys.exit(1 if failures else 0)
