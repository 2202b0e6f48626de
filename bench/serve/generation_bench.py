#!/usr/bin/env python3
"""Generation through kiln serve: completion tokens/s for 1 stream and for 16
concurrent streams (POST /v1/completions, 128 tokens each with ignore_eos, so
every completion has the same length; 4 completions per stream, on loopback).
Usage: generation_bench.py BASE_URL MODEL [LABEL]"""
import json, os, sys, threading, time, urllib.request

base, model = sys.argv[1], sys.argv[2]
label = sys.argv[3] if len(sys.argv) > 3 else ""
# KILN_GEN_ROUNDS and KILN_GEN_TOKENS shorten it for larger models.
ROUNDS, TOKENS = int(os.environ.get("KILN_GEN_ROUNDS", 4)), int(os.environ.get("KILN_GEN_TOKENS", 128))


def one(seed):
    body = json.dumps({"model": model, "prompt": "The ", "max_tokens": TOKENS, "temperature": 1.0, "seed": seed,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))["usage"]["completion_tokens"]


def stream(i, tokens):
    for r in range(ROUNDS):
        tokens[i] += one(i * ROUNDS + r + 1)


for streams in (1, 16):
    tokens = [0] * streams
    start = time.time()
    threads = [threading.Thread(target=stream, args=(i, tokens)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.time() - start
    print(f"| {label}{streams} | {sum(tokens)} | {seconds:.2f} | {sum(tokens) / seconds:,.1f} |")
