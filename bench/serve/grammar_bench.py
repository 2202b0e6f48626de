#!/usr/bin/env python3
"""Constrained decoding's cost through kiln serve, one stream: completion
tokens/s unconstrained and under a JSON schema (response_format
json_schema; an array of at least 64 small objects, so that neither answer
ends before max_tokens), each request timed end to end on loopback, best
of ROUNDS. The first constrained request pays the grammar's compile and
its masks' first computation; later ones reuse them when the schema is the
same. Prints the best tokens/s of each and the median pair's ratio.
Usage: grammar_bench.py BASE_URL MODEL [ROUNDS=4] [TOKENS=128]"""
import json, sys, time, urllib.request

base, model = sys.argv[1], sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 4
TOKENS = int(sys.argv[4]) if len(sys.argv) > 4 else 128
SCHEMA = {"type": "array", "minItems": 64, "items": {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}, "admin": {"type": "boolean"}},
    "required": ["name", "age", "admin"], "additionalProperties": False}}


def one(seed, constrained):
    body = {"model": model, "prompt": "People:", "max_tokens": TOKENS, "temperature": 1.0, "seed": seed,
            "ignore_eos": True}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "people", "schema": SCHEMA}}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.time()
    r = json.load(urllib.request.urlopen(req, timeout=600))
    return r["usage"]["completion_tokens"] / (time.time() - start)


one(0, False)  # warm up: weights paged in, threads started
first = one(1, True)
# Pairs, one of each back to back, so that the machine's drift (a shared
# VM's neighbours) touches both: the ratio is the median pair's.
pairs = [(one(10 + r, False), one(20 + r, True)) for r in range(ROUNDS)]
plain = max(p for p, _ in pairs)
constrained = max(c for _, c in pairs)
ratios = sorted(c / p for p, c in pairs)
print(f"| {model} | {plain:.1f} | {first:.1f} | {constrained:.1f} | {ratios[len(ratios) // 2]:.3f} |")
