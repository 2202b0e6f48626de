#!/usr/bin/env python3
"""PyTorch side of the GPU benchmarks: the same work as bench_gpu, one JSON line each.

  torch_gpu_bench.py matmul --n 8192 --dtype bf16
  torch_gpu_bench.py copy --mib 1024
  torch_gpu_bench.py gpt --batch 8 [--no-compile]

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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bench", choices=["matmul", "copy", "gpt"])
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
    if a.bench == "matmul":
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
