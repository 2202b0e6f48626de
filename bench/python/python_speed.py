#!/usr/bin/env python3
"""Kiln from Python, measured beside what it is compared with, in one run:
  1. the MLP training loop of tests/python/test_training.py against
     `kiln train fashion-mlp` (images/s over the same steps, the same machine);
  2. the per-call overhead of a tiny op (a + b on 16 float32 elements), Kiln
     against PyTorch in the same interpreter.
Usage: PYTHONPATH=build/python python3 bench/python/python_speed.py KILN_COMMAND [STEPS]"""
import json
import os
import subprocess
import sys
import tempfile
import time
import timeit

import numpy as np

import kiln
import kiln.nn.functional as F
from kiln import data, nn, optim

BATCH, LR = 128, 1e-3


def cli_images_per_second(kiln_cli, steps):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([kiln_cli, "train", "fashion-mlp", "--steps", str(steps), "--out", out, "--no-progress"],
                       check=True, capture_output=True)
        seconds = [json.loads(line)["train_s"] for line in open(os.path.join(out, "metrics.jsonl"))
                   if json.loads(line)["kind"] == "train"]
    return steps * BATCH / seconds[-1]  # train_s: the loop's own time, evaluation and checkpoints excluded


def python_images_per_second(steps):
    kiln.manual_seed(1337)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    opt = optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-4)
    train_set = data.FashionMNIST("train")
    rows, _ = data.split_indices(len(train_set), data.FASHION_MNIST_VALIDATION_SIZE)
    loader = data.ImageLoader(train_set, rows, batch_size=BATCH, drop_last=True, seed=1337)
    start = time.perf_counter()
    for step in range(steps):
        x, y = loader.next()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.lr = optim.warmup_cosine_lr(step, min(100, steps // 10), steps, LR, LR * 0.02)
        opt.step()
        loss.item()  # the recipe reads each step's loss too
    return steps * BATCH / (time.perf_counter() - start)


def per_call_ns(stmt, setup_globals, number=20000, repeat=7):
    return min(timeit.repeat(stmt, globals=setup_globals, number=number, repeat=repeat)) / number * 1e9


def main():
    kiln_cli, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 600
    print(f"kiln {kiln.__version__}, {kiln.get_num_threads()} threads")
    rounds = [(cli_images_per_second(kiln_cli, steps), python_images_per_second(steps)) for _ in range(3)]
    cli = max(r[0] for r in rounds)
    py = max(r[1] for r in rounds)
    print(f"MLP training, {steps} steps of {BATCH}: kiln train {cli:.0f} img/s, Python loop {py:.0f} img/s, "
          f"ratio {py / cli:.3f} (best of 3 each)")
    a, b = kiln.ones([16]), kiln.ones([16])
    kiln_ns = per_call_ns("a + b", {"a": a, "b": b})
    line = f"a + b on 16 float32: Kiln {kiln_ns:.0f} ns per call"
    try:
        import torch
        ta, tb = torch.ones(16), torch.ones(16)
        torch_ns = per_call_ns("a + b", {"a": ta, "b": tb})
        line += f", PyTorch {torch.__version__} {torch_ns:.0f} ns; Kiln/PyTorch {kiln_ns / torch_ns:.2f}"
    except ImportError:
        line += " (PyTorch not importable here)"
    print(line)


if __name__ == "__main__":
    main()
