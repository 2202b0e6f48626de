#!/usr/bin/env python3
"""Generation through kiln serve: completion tokens/s for 1 stream and for 16
concurrent streams (POST /v1/completions, max_tokens 64, on loopback).
Usage: generation_bench.py BASE_URL MODEL"""
import json, sys, threading, time, urllib.request

base, model = sys.argv[1], sys.argv[2]


def one(seed):
    body = json.dumps({"model": model, "prompt": "The ", "max_tokens": 64, "temperature": 1.0, "seed": seed}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))["usage"]["completion_tokens"]


for streams in (1, 16):
    tokens = [0] * streams
    start = time.time()
    threads = [threading.Thread(target=lambda i=i: tokens.__setitem__(i, one(i + 1))) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.time() - start
    print(f"| {streams} | {sum(tokens)} | {seconds:.2f} | {sum(tokens) / seconds:.1f} |")
