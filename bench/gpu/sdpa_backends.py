#!/usr/bin/env python3
"""Which of PyTorch's attention kernels sets the bar, and what cuDNN offers.

Times causal scaled_dot_product_attention forward+backward (bench_gpu
attention's shapes and FLOP count) under each SDPA backend PyTorch has
(flash, cuDNN, memory-efficient, and the default choice), and prints where
the cuDNN library and headers that PyTorch's wheels carry live, for a Kiln
build that would call cuDNN's fused attention. One JSON line per measure.
"""
import glob
import json
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_gpu_bench import timed


def main():
    found = {}
    for pattern in ("libcudnn.so*", "libcudnn_graph.so*", "cudnn_graph.h", "cudnn_frontend.h"):
        hits = []
        for root in ("/usr", "/opt"):
            hits += glob.glob(os.path.join(root, "**", pattern), recursive=True)
        found[pattern] = sorted(hits)[:4]
    print(json.dumps({"bench": "cudnn", "version": torch.backends.cudnn.version(), "files": found}), flush=True)
    backends = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for T in (1024, 4096):
        for D in (64, 128):
            B, H = max(1, 16384 // T), 2048 // D
            q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))
            dout = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
            for name, backend in backends.items():
                def step():
                    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)
                try:
                    if backend is None:
                        s = timed(step, 3, 10)
                    else:
                        with sdpa_kernel(backend):
                            s = timed(step, 3, 10)
                    tflops = 3.5 * 4 * B * H * T * T * D / 2 / s / 1e12
                    print(json.dumps({"bench": "sdpa", "backend": name, "T": T, "D": D, "ms": s * 1e3,
                                      "tflops": tflops}), flush=True)
                except RuntimeError as e:
                    print(json.dumps({"bench": "sdpa", "backend": name, "T": T, "D": D,
                                      "error": str(e).splitlines()[0][:200]}), flush=True)


if __name__ == "__main__":
    main()
