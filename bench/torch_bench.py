#!/usr/bin/python3
"""PyTorch CPU twin of bench/kiln_bench.cpp: the same MLP, CNN and GPT, the
same synthetic inputs (made once, before timing), the same full training step
(forward, cross-entropy, backward, AdamW step) and the same JSON line, so
bench/run_cpu_bench.sh can print Kiln's throughput as a ratio of PyTorch's.

    /usr/bin/python3 bench/torch_bench.py --model mlp|cnn|gpt --threads N --steps S --warmup W --batch B

Debian's torch is importable only by /usr/bin/python3 (not a pyenv python).
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def make_cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


# ---- GPT in nanoGPT's style (GPT-2 architecture: pre-norm, learned positions,
# tanh-GELU MLP, tied embeddings). torch 1.13 has no fused
# scaled_dot_product_attention, so attention is nanoGPT's explicit fallback.

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2: the fused kernel, as nanoGPT uses
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab_size=2048, block_size=128, n_layer=4, n_head=4, n_embd=128):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, ids, targets):
        T = ids.size(1)
        pos = torch.arange(T, dtype=torch.long)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def time_training(args, model, loss_fn):
    # weight_decay 0.01, as Kiln's default; PyTorch 2 runs its fused (single-pass) AdamW on the CPU too.
    fused = {"fused": True} if int(torch.__version__.split(".")[0]) >= 2 else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **fused)

    def step():
        if args.precision == "bf16":  # CPU autocast: matrix products and convolutions in bf16, as Kiln's --precision bf16
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = loss_fn()
        else:
            loss = loss_fn()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        last = step()
    seconds = time.perf_counter() - t0
    if not math.isfinite(last):
        raise SystemExit(f"torch_bench: loss is not finite ({last})")
    return args.steps / seconds


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["mlp", "cnn", "gpt"], default="mlp")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=0, help="0: the model's default (128 images, 16 sequences)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2; compiling is warmup)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: under CPU autocast")
    args = p.parse_args()
    if args.threads < 1 or args.steps < 1 or args.warmup < 0 or args.batch < 0:
        raise SystemExit("torch_bench: --threads and --steps must be positive, --warmup and --batch non-negative")
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    major = torch.__version__.split(".")[0]
    engine = "torch1" if major == "1" else ("torch2-compile" if args.compile else "torch2-eager")
    out = {"engine": engine, "torch_version": torch.__version__, "model": args.model, "threads": args.threads,
           "steps": args.steps, "warmup": args.warmup, "precision": args.precision}
    if args.model in ("mlp", "cnn"):
        B = args.batch or 128
        model = make_mlp() if args.model == "mlp" else make_cnn()
        model.train()
        run = torch.compile(model) if args.compile else model
        x = torch.rand(B, 1, 28, 28) * 2 - 1
        y = torch.randint(0, 10, (B,))
        sps = time_training(args, model, lambda: F.cross_entropy(run(x), y))
        out.update(batch=B, params=sum(p.numel() for p in model.parameters()), unit="images/s", items_per_s=sps * B, step_ms=1e3 / sps)
    else:
        B, T = args.batch or 16, 128
        model = Gpt()
        model.train()
        run = torch.compile(model) if args.compile else model
        ids = torch.randint(0, 2048, (B, T))
        targets = torch.randint(0, 2048, (B, T))
        sps = time_training(args, model, lambda: run(ids, targets))
        out.update(batch=B, params=sum(p.numel() for p in model.parameters()), unit="tokens/s", items_per_s=sps * B * T, step_ms=1e3 / sps)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
