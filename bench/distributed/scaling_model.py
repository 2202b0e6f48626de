#!/usr/bin/env python3
"""Data-parallel scaling of GPT-2 124M from 8 to 1,024 GPUs: a model, not a
measurement. Writes docs/scaling_model.svg and prints the table that
docs/PERFORMANCE.md quotes.

Compute per step (an assumption: no GPU was lent to measure it): 6 x N x
tokens FLOPs at 40% of an H100's 989 TFLOP/s dense bf16 (the planner's
default MFU). Communication: a ring all-reduce of the bf16 gradients in
25 MiB buckets, each taking 2 (N-1)/N x bytes / bus bandwidth plus
2 (N-1) x a per-hop latency. Backward (2/3 of the compute) hides the
all-reduce; only what is left over is exposed.
  weak scaling:   16 x 1024 tokens per GPU per step, whatever N
  strong scaling: 0.5M tokens per step (llm.c's GPT-2 run) split over N GPUs
Usage: bench/distributed/scaling_model.py [out.svg]
"""
import math
import sys

PARAMS = 124.4e6
GRAD_BYTES = PARAMS * 2  # bf16 gradients
BUCKET = 25 * 2**20
PEAK, MFU = 989e12, 0.40
LINKS = {"NVLink-class (370 GB/s, 2 us/hop)": (370e9, 2e-6), "InfiniBand NDR-class (50 GB/s, 5 us/hop)": (50e9, 5e-6)}
GPUS = [8, 16, 32, 64, 128, 256, 512, 1024]


def compute_s(tokens):
    return 6 * PARAMS * tokens / (PEAK * MFU)


def allreduce_s(n, bw, hop):
    buckets = math.ceil(GRAD_BYTES / BUCKET)
    return 2 * (n - 1) / n * GRAD_BYTES / bw + buckets * 2 * (n - 1) * hop


def efficiency(n, bw, hop, tokens_per_gpu):
    c = compute_s(tokens_per_gpu)
    exposed = max(0.0, allreduce_s(n, bw, hop) - 2 / 3 * c)
    return c / (c + exposed)


def curves():
    out = {}
    for name, (bw, hop) in LINKS.items():
        out[f"weak, {name}"] = [efficiency(n, bw, hop, 16 * 1024) for n in GPUS]
        out[f"strong, {name}"] = [efficiency(n, bw, hop, max(1024, 524288 / n)) for n in GPUS]
    return out


def svg(data, path):
    w, h, left, top, right, bottom = 760, 420, 60, 20, 300, 50
    pw, ph = w - left - right, h - top - bottom
    x = lambda n: left + pw * math.log2(n / GPUS[0]) / math.log2(GPUS[-1] / GPUS[0])
    y = lambda e: top + ph * (1 - e)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>']
    for e in [0, 0.25, 0.5, 0.75, 1.0]:
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(e)}" y2="{y(e)}" stroke="#ddd"/>'
                     f'<text x="{left - 8}" y="{y(e) + 4}" text-anchor="end">{e:.0%}</text>')
    for n in GPUS:
        parts.append(f'<text x="{x(n)}" y="{top + ph + 18}" text-anchor="middle">{n}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{h - 10}" text-anchor="middle">GPUs (data parallel, GPT-2 124M)</text>')
    parts.append(f'<text x="14" y="{top + ph / 2}" transform="rotate(-90 14 {top + ph / 2})" text-anchor="middle">'
                 'scaling efficiency</text>')
    for i, (name, effs) in enumerate(data.items()):
        dash = "" if name.startswith("weak") else ' stroke-dasharray="6 4"'
        pts = " ".join(f"{x(n):.1f},{y(e):.1f}" for n, e in zip(GPUS, effs))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{colors[i]}" stroke-width="2"{dash}/>')
        parts.append(f'<line x1="{left + pw + 15}" x2="{left + pw + 40}" y1="{top + 20 + 22 * i}" '
                     f'y2="{top + 20 + 22 * i}" stroke="{colors[i]}" stroke-width="2"{dash}/>'
                     f'<text x="{left + pw + 45}" y="{top + 24 + 22 * i}" font-size="10">{name}</text>')
    parts.append("</svg>")
    open(path, "w").write("\n".join(parts) + "\n")


if __name__ == "__main__":
    data = curves()
    print("| GPUs | " + " | ".join(data) + " |")
    print("|---:|" + "---:|" * len(data))
    for i, n in enumerate(GPUS):
        print(f"| {n} | " + " | ".join(f"{v[i]:.0%}" for v in data.values()) + " |")
    c = compute_s(16 * 1024)
    print(f"\ncompute per step at 16K tokens/GPU: {c * 1e3:.1f} ms (backward hides {2 / 3 * c * 1e3:.1f} ms); "
          + "; ".join(f"all-reduce at 1,024 GPUs over {k.split(' (')[0]}: {allreduce_s(1024, *v) * 1e3:.1f} ms"
                      for k, v in LINKS.items()))
    svg(data, sys.argv[1] if len(sys.argv) > 1 else "docs/scaling_model.svg")
