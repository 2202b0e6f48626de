#!/usr/bin/python3
"""PyTorch reference for tests/test_parity_torch.cpp.

Usage: /usr/bin/python3 torch_reference.py OUT_DIR [CASE ...]

For each case (mlp, gpt; default both) builds the model in plain PyTorch from a fixed seed
and writes, into OUT_DIR:
  <case>_weights.safetensors   every parameter, by its state_dict name
  <case>_inputs.safetensors    mlp: images f32 [8,1,28,28], labels i64 [8]
                               gpt: ids i64 [2,16], targets i64 [2,16]
  <case>_expected.safetensors  loss, logits, grad.<name> after one
                               forward/backward, and after_step.<name> after
                               one torch.optim.AdamW step
  <case>_config.json           the model shape the C++ side must build

The Python `safetensors` package is deliberately not used (Debian does not ship
it); the format is small enough to write here. Needs only torch and numpy.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

# ---------------------------------------------------------------- safetensors

_DTYPES = {torch.float32: ("F32", "<f4"), torch.float64: ("F64", "<f8"), torch.int64: ("I64", "<i8"),
           torch.int32: ("I32", "<i4")}
_NP_BY_NAME = {name: np_dtype for name, np_dtype in _DTYPES.values()}


def save_safetensors(path, tensors):
    """tensors: list of (name, torch.Tensor). Writes the safetensors layout:
    u64 little-endian header length, JSON header padded with spaces to a
    multiple of 8, then the raw little-endian bytes in header order."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors:
        st_dtype, np_dtype = _DTYPES[t.dtype]
        data = np.ascontiguousarray(t.detach().cpu().numpy().astype(np_dtype)).tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """The inverse of save_safetensors (used by the self-check below)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    buf = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        arr = np.frombuffer(buf[begin:end], dtype=_NP_BY_NAME[info["dtype"]]).reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


# ---------------------------------------------------------------- models

def make_mlp():
    # Same module indices as kiln::models::make_mlp: 1, 3, 5 are the Linears.
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 10))


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]
        self.c_attn = nn.Linear(self.n_embd, 3 * self.n_embd)
        self.c_proj = nn.Linear(self.n_embd, self.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"])
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"])

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"], eps=1e-5)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"], eps=1e-5)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """nanoGPT's GPT-2 (dropout 0), lm_head tied to wte."""

    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=nn.LayerNorm(c["n_embd"], eps=1e-5),
        ))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight
        # GPT-2's init shape, but with std 1/sqrt(n_embd) instead of 0.02 so
        # that pre-activations are O(1): with 0.02 the attention is almost
        # uniform and GELU almost linear, and the test could not tell the tanh
        # GELU from the exact one or notice a wrong attention scale. Biases and
        # norm affines are non-trivial, so a mis-loaded bias or a swapped
        # LayerNorm weight/bias shows up.
        std = 1.0 / math.sqrt(c["n_embd"])
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * c["n_layer"]))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, std)
            elif ".ln_" in name or "ln_f" in name:
                with torch.no_grad():
                    p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, ids):
        T = ids.size(1)
        pos = torch.arange(T, dtype=torch.long)
        x = self.transformer.wte(ids) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


GPT_CONFIG = dict(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0)

# ---------------------------------------------------------------- cases


def run_case(out_dir, case, model, inputs, loss_fn):
    params = list(model.named_parameters())  # tied weights appear once
    save_safetensors(os.path.join(out_dir, f"{case}_weights.safetensors"), params)
    save_safetensors(os.path.join(out_dir, f"{case}_inputs.safetensors"), list(inputs.items()))

    logits, loss = loss_fn(model, inputs)
    loss.backward()
    expected = [("loss", loss.detach()), ("logits", logits.detach())]
    expected += [("grad." + n, p.grad.detach().clone()) for n, p in params]

    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    opt.step()
    expected += [("after_step." + n, p.detach().clone()) for n, p in params]
    save_safetensors(os.path.join(out_dir, f"{case}_expected.safetensors"), expected)

    # Self-check of the writer: what we wrote reads back bit-identically.
    back = load_safetensors(os.path.join(out_dir, f"{case}_expected.safetensors"))
    for n, t in expected:
        assert torch.equal(back[n], t), f"safetensors round trip changed {n}"
    print(f"{case}: loss {loss.item():.6f}, {len(params)} parameters")


def main():
    cases = sys.argv[2:] or ["mlp", "gpt"]
    if len(sys.argv) < 2 or any(c not in ("mlp", "gpt") for c in cases):
        sys.exit("usage: torch_reference.py OUT_DIR [mlp] [gpt]")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)  # small models; keeps the run quick and repeatable

    if "mlp" in cases:
        run_mlp(out_dir)
    if "gpt" in cases:
        run_gpt(out_dir)


def run_mlp(out_dir):
    torch.manual_seed(1234)
    mlp = make_mlp()
    mlp_inputs = {"images": torch.rand(8, 1, 28, 28), "labels": torch.randint(0, 10, (8,))}

    def mlp_loss(model, x):
        logits = model(x["images"])
        return logits, F.cross_entropy(logits, x["labels"])

    run_case(out_dir, "mlp", mlp, mlp_inputs, mlp_loss)


def run_gpt(out_dir):
    torch.manual_seed(5678)
    gpt = Gpt(GPT_CONFIG)
    ids = torch.randint(0, GPT_CONFIG["vocab_size"], (2, GPT_CONFIG["block_size"] + 1))
    gpt_inputs = {"ids": ids[:, :-1].contiguous(), "targets": ids[:, 1:].contiguous()}

    def gpt_loss(model, x):
        logits = model(x["ids"])
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), x["targets"].view(-1))

    run_case(out_dir, "gpt", gpt, gpt_inputs, gpt_loss)
    with open(os.path.join(out_dir, "gpt_config.json"), "w") as f:
        json.dump(GPT_CONFIG, f)


if __name__ == "__main__":
    main()
