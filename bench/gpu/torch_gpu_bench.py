#!/usr/bin/env python3
"""PyTorch side of the GPU benchmarks: the same work as bench_gpu, one JSON line each.

  torch_gpu_bench.py matmul --n 8192 --dtype bf16
  torch_gpu_bench.py copy --mib 1024
  torch_gpu_bench.py gpt --batch 8 [--no-compile]
  torch_gpu_bench.py compare --n 10000      the same work on the CPU and the GPU
  torch_gpu_bench.py attention --block 1024 --width 64   causal SDPA forward+backward (width: head dim)

The GPT is GPT-2 124M (nanoGPT-style, tanh GELU, tied embeddings, vocab
50304), trained with bf16 autocast, fused AdamW, scaled_dot_product_attention
and torch.compile: the strongest plain-PyTorch baseline.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, width):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def cnn():
    """models::make_cnn: two conv(3x3)-ReLU-maxpool stages, then 3136 -> 128 -> 10."""
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def seconds(dev, warmup, iters, fn):
    for _ in range(warmup):
        fn()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(dev)
    return (time.perf_counter() - t0) / iters


def compare(n):
    """bench_gpu compare's rows, with the same names: eager PyTorch (no
    torch.compile: Kiln runs eagerly too), all CPU cores, fused AdamW on the GPU."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda")

    def matmul(dev, dt, iters):
        with torch.no_grad():
            a = torch.rand(n, n, device=dev, dtype=dt) - 0.5
            b = torch.rand(n, n, device=dev, dtype=dt) - 0.5
            return seconds(dev, 2 if dev.type == "cuda" else 1, iters, lambda: a @ b)

    def train_step(dev, model, x, y, loss_fn, iters):
        model = model.to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=dev.type == "cuda")
        x, y = x.to(dev), y.to(dev)

        def step():
            loss = loss_fn(model, x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return seconds(dev, 2, iters, step)

    def gpt_step(dev, iters):
        ids = torch.randint(0, 2048, (16, 128))
        return train_step(dev, GPT(2048, 128, 4, 4, 128), ids, ids, lambda m, x, y: m(x, y), iters)

    def cnn_step(dev, iters):
        x, y = torch.rand(128, 1, 28, 28), torch.arange(128) % 10
        return train_step(dev, cnn(), x, y, lambda m, x, y: F.cross_entropy(m(x), y), iters)

    def cnn_inference(dev, iters):
        model = cnn().to(dev).eval()
        x = torch.rand(1024, 1, 28, 28, device=dev)
        with torch.no_grad():
            return seconds(dev, 2, iters, lambda: model(x).argmax(1))

    rows = [("matmul f32 (tf32 on GPU)", lambda d, i: matmul(d, torch.float32, i)),
            ("matmul bf16", lambda d, i: matmul(d, torch.bfloat16, i)),
            ("GPT training step (fortunes-gpt model, batch 16, fp32)", gpt_step),
            ("CNN training step (batch 128)", cnn_step),
            ("CNN batched inference (batch 1024)", cnn_inference)]
    for work, fn in rows:
        c, g = fn(cpu, 1 if work.startswith("matmul") else 3), fn(gpu, 10)
        print(json.dumps({"bench": "compare", "impl": "torch", "work": work, "device": "cuda:0",
                          "cpu_ms": c * 1e3, "device_ms": g * 1e3, "speedup": c / g}), flush=True)


def attention(T, D, dt, iters):
    """bench_gpu attention's measure: causal scaled_dot_product_attention forward
    and backward over B*T = 16,384 tokens, H*D = 2,048, FlashAttention's FLOP count."""
    B, H = max(1, 16384 // T), 2048 // D
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
    dout = torch.randn(B, H, T, D, device="cuda", dtype=dt)

    def step():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)
    s = timed(step, 2, iters)
    with torch.no_grad():
        forward = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 2, iters)
    return s, 3.5 * 4 * B * H * T * T * D / 2 / s / 1e12, forward


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bench", choices=["matmul", "copy", "gpt", "compare", "attention"])
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--mib", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--no-compile", action="store_true")
    a = p.parse_args()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    if a.bench == "compare":
        compare(a.n)
    elif a.bench == "attention":
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "f16": torch.float16}[a.dtype]
        s, tflops, forward = attention(a.block, a.width, dt, a.iters)
        print(json.dumps({"bench": "attention", "impl": "torch", "T": a.block, "D": a.width, "dtype": a.dtype,
                          "ms": s * 1e3, "tflops": tflops, "forward_ms": forward * 1e3}))
    elif a.bench == "matmul":
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
        x = torch.rand(a.n, a.n, device=dev, dtype=dt) - 0.5
        y = torch.rand(a.n, a.n, device=dev, dtype=dt) - 0.5
        s = timed(lambda: x @ y, 2, a.iters)
        print(json.dumps({"bench": "matmul", "impl": "torch", "n": a.n, "dtype": a.dtype,
                          "ms": s * 1e3, "tflops": 2 * a.n ** 3 / s / 1e12}))
    elif a.bench == "copy":
        n = a.mib * (1 << 20) // 4
        src = torch.rand(n, device=dev)
        dst = torch.empty_like(src)
        s = timed(lambda: dst.copy_(src), 2, a.iters)
        print(json.dumps({"bench": "copy", "impl": "torch", "mib": a.mib, "gbs": 2 * n * 4 / s / 1e9}))
    else:
        model = GPT(50304, a.block, a.layers, a.heads, a.width).to(dev)
        params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
        step_model = model if a.no_compile else torch.compile(model)
        idx = torch.randint(0, 50304, (a.batch, a.block), device=dev)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(idx, idx)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        s = timed(step, 3, a.iters)
        tok_s = a.batch * a.block / s
        print(json.dumps({"bench": "gpt", "impl": "torch", "compiled": not a.no_compile, "params": params,
                          "batch": a.batch, "block": a.block, "tokens_per_s": tok_s,
                          "mfu": 6 * params * tok_s / 989e12}))


if __name__ == "__main__":
    main()
