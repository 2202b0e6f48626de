#!/usr/bin/env python3
"""Writes the body of a one-image KServe v2 request with binary tensor data
(a JSON header, then 784 little-endian FP32 pixels) to PATH and prints the
header's length, the Inference-Header-Content-Length to send with it.
Used by bench/serve/serve_bench.sh and bench/gpu/serve_gpu.sh.
Usage: binary_body.py PATH"""
import json, struct, sys

header = json.dumps({"inputs": [{"name": "images", "shape": [1, 1, 28, 28], "datatype": "FP32",
                                 "parameters": {"binary_data_size": 784 * 4}}]}).encode()
with open(sys.argv[1], "wb") as f:
    f.write(header + struct.pack("<784f", *[((i * 37) % 256) / 255 for i in range(784)]))
print(len(header))
