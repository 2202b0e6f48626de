#!/usr/bin/env python3
"""transformers' side of bench/gpu/decode_gpu.sh: completion tokens/s of
greedy generate() on the GPU for 1 stream and for 16 (one batch of 16 equal
prompts' continuations), 128 new tokens each, the eos ignored (min_new_tokens),
best of 3. Prints the same table rows as bench/serve/generation_bench.py.
    transformers_decode.py DIR LABEL [dtype]"""
import sys
import time

import torch
from transformers import AutoModelForCausalLM

d, label = sys.argv[1], sys.argv[2]
dtype = getattr(torch, sys.argv[3]) if len(sys.argv) > 3 else torch.bfloat16
model = AutoModelForCausalLM.from_pretrained(d, dtype=dtype).to("cuda").eval()
TOKENS = 128
for streams in (1, 16):
    ids = torch.tensor([[1, 450, 29871]] * streams, device="cuda")  # a three-token prompt, as "The " is
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=TOKENS, min_new_tokens=TOKENS,
                             do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    tokens = (out.shape[1] - ids.shape[1]) * streams
    print(f"| {label}{streams} | {tokens} | {best:.2f} | {tokens / best:,.1f} |", flush=True)
