"""transformers' side of bench/hf/run.sh: the same measurements as
kiln_hf_bench on the same folder, with PyTorch 2 (eager, the default
attention), best of R runs. Prints one JSON line.

    python transformers_peer.py DIR [prompt_tokens] [new_tokens] [repeats] [dtype]
"""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache

d = sys.argv[1]
P, N, R = (int(a) for a in (sys.argv[2:5] + ["128", "64", "3"][len(sys.argv[2:5]):]))
dtype = getattr(torch, sys.argv[5]) if len(sys.argv) > 5 else torch.float32
t = time.perf_counter()
model = AutoModelForCausalLM.from_pretrained(d, dtype=dtype).eval()
load_s = time.perf_counter() - t
with torch.no_grad():
    model(torch.tensor([[5]]))
first_logits_s = time.perf_counter() - t
prompt = torch.tensor([[3 + (i * 7919) % 600 for i in range(P)]])
best_prefill = best_decode = float("inf")
with torch.no_grad():
    for _ in range(R):
        cache = DynamicCache()
        t = time.perf_counter()
        out = model(prompt, past_key_values=cache, use_cache=True)
        prefill = time.perf_counter() - t
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        t = time.perf_counter()
        for _ in range(N):  # what generate(do_sample=False) does per token, without its bookkeeping
            out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        best_prefill, best_decode = min(best_prefill, prefill), min(best_decode, time.perf_counter() - t)
print(json.dumps({"engine": f"transformers {__import__('transformers').__version__} torch {torch.__version__}",
                  "load_s": load_s, "first_logits_s": first_logits_s,
                  "prefill_tokens_per_s": P / best_prefill, "decode_tokens_per_s": N / best_decode}))
