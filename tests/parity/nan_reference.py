"""What PyTorch does with NaN and +-inf, op by op, forward and backward.

Writes a JSON list of cases to argv[1]. Each case has the op's name, its
inputs, PyTorch's output and, for each input that takes a gradient, its
gradient for an upstream gradient of ones. Non-finite numbers are written as
the strings "nan", "inf", "-inf" (JSON has none). tests/test_nan_propagation.cpp
runs the same ops in Kiln and compares.
"""
import json
import math
import sys

import torch

nan, inf = float("nan"), float("inf")


def encode(values):
    out = []
    for v in values:
        if math.isnan(v):
            out.append("nan")
        elif math.isinf(v):
            out.append("inf" if v > 0 else "-inf")
        else:
            out.append(v)
    return out


def tensor_json(t):
    return {"shape": list(t.shape), "values": encode(t.detach().double().flatten().tolist())}


cases = []


def case(name, fn, *inputs, grad=True):
    """inputs: (values, shape, dtype, requires_grad)"""
    ts = []
    for values, shape, dtype, rg in inputs:
        t = torch.tensor(values, dtype=dtype).reshape(shape)
        if rg and grad:
            t.requires_grad_(True)
        ts.append(t)
    out = fn(*ts)
    grads = [None] * len(ts)
    if out.requires_grad:
        out.backward(torch.ones_like(out))
        grads = [tensor_json(t.grad) if t.requires_grad and t.grad is not None else None for t in ts]
    cases.append({
        "op": name,
        "inputs": [{"shape": list(shape), "values": encode(values), "dtype": str(dtype).replace("torch.", ""),
                    "requires_grad": bool(rg and grad)} for values, shape, dtype, rg in inputs],
        "out": tensor_json(out),
        "grads": grads,
    })


f32, i64 = torch.float32, torch.int64
special = [nan, -1.5, 2.0, -inf, inf, 0.5]
for name, fn in [("relu", torch.relu), ("gelu", lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
                 ("tanh", torch.tanh), ("sigmoid", torch.sigmoid), ("exp", torch.exp), ("log", torch.log),
                 ("sqrt", torch.sqrt), ("neg", torch.neg), ("square", torch.square)]:
    case(name, fn, (special, [6], f32, True))

a = [nan, 1.0, 2.0, inf, -inf, 3.0]
b = [0.0, nan, 2.0, inf, 1.0, -inf]
for name, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("div", torch.div),
                 ("maximum", torch.maximum)]:
    case(name, fn, (a, [6], f32, True), (b, [6], f32, True))

rows = [nan, 1.0, 2.0, inf, -inf, 0.0, 1.0, inf, 3.0]
case("sum", lambda x: x.sum(-1), (rows, [3, 3], f32, True))
case("mean", lambda x: x.mean(-1), (rows, [3, 3], f32, True))
case("amax", lambda x: x.amax(-1), (rows, [3, 3], f32, False))
case("argmax", lambda x: x.argmax(-1), ([1.0, nan, 3.0, 2.0, 5.0, nan, 0.0, 7.0, 7.0], [3, 3], f32, False))

soft = [0.0, -inf, 1.0, nan, 0.0, 1.0, -inf, -inf, -inf, 0.0, inf, 1.0]
case("softmax", lambda x: torch.softmax(x, -1), (soft, [4, 3], f32, True))
case("log_softmax", lambda x: torch.log_softmax(x, -1), (soft, [4, 3], f32, True))

# Cross-entropy per row: a NaN logit away from the target and element 0; a
# -inf logit away from the target; a -inf target logit.
for logits, target in [([0.0, 1.0, nan, 2.0], 1), ([0.0, -inf, 1.0, 2.0], 0), ([0.0, -inf, 1.0, 2.0], 1)]:
    case("cross_entropy", torch.nn.functional.cross_entropy, (logits, [1, 4], f32, True), ([target], [1], i64, False))

case("layer_norm", lambda x, w, bias: torch.nn.functional.layer_norm(x, (3,), w, bias),
     ([1.0, nan, 2.0, 1.0, inf, 2.0, 1.0, 2.0, 4.0], [3, 3], f32, True), ([1.0, 1.0, 1.0], [3], f32, True),
     ([0.0, 0.0, 0.0], [3], f32, True))
case("matmul", torch.matmul, ([nan, 1.0, 2.0, 3.0], [2, 2], f32, True), ([1.0, 2.0, 3.0, 4.0], [2, 2], f32, True))
case("max_pool2d", lambda x: torch.nn.functional.max_pool2d(x, 2),
     ([1.0, nan, 0.0, 1.0, 3.0, 2.0, 5.0, 4.0], [1, 1, 2, 4], f32, True))
case("embedding", torch.nn.functional.embedding, ([0, 1, 1], [3], i64, False),
     ([1.0, 2.0, nan, 3.0, 4.0, 5.0], [3, 2], f32, True))


def attention(q, k, v):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.triu(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool), 1)
    return torch.softmax(s.masked_fill(mask, -inf), -1) @ v


qkv = [0.1 * i for i in range(6)]
k_nan = list(qkv)
k_nan[2] = nan  # key 1: rows 0 stays finite (causal), rows 1 and 2 become NaN
case("attention", attention, (qkv, [1, 1, 3, 2], f32, True), (k_nan, [1, 1, 3, 2], f32, True),
     (qkv, [1, 1, 3, 2], f32, True))
x = [0.0] * 9
x[0] = nan
case("conv2d", lambda x, w: torch.nn.functional.conv2d(x, w), (x, [1, 1, 3, 3], f32, True),
     ([1.0, 1.0, 1.0, 1.0], [1, 1, 2, 2], f32, True))

with open(sys.argv[1], "w") as f:
    json.dump(cases, f)
