"""Time to accuracy in PyTorch with Kiln's fashion-cnn recipe, for
bench/time_to_accuracy.sh: the same CNN (conv 1->32, pool, conv 32->64,
pool, 128, dropout 0.25, 10), the same data (Debian's dataset-fashion-mnist,
55,000 training images after holding out 5,000, normalised with mean 0.2860
and std 0.3530), batch 128 with the last partial batch dropped, AdamW
(lr 2e-3, weight decay 1e-4, PyTorch 2's fused CPU kernel), a linear warmup
over min(100, steps/10) steps then cosine decay to 2% of the peak. After
every epoch it tests on the 10,000 test images; the clock counts training
steps only, as `kiln train --target-accuracy` does. Prints one JSON line.

PyTorch's own initialisation is used (Kiln's differs in its random stream,
not in its scheme), so the two runs do not see identical weights.
"""
import argparse
import gzip
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530
DATA = "/usr/share/datasets/fashion-mnist"


def load(kind):
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STD
    return x, torch.from_numpy(labels.astype(np.int64))


def make_cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def lr_at(step, warmup, total, peak, floor_ratio=0.02):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    low = peak * floor_ratio
    return low + 0.5 * (peak - low) * (1 + math.cos(math.pi * progress))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum((model(x[i:i + 500]).argmax(1) == y[i:i + 500]).sum().item() for i in range(0, len(x), 500))
    model.train()
    return correct / len(x)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--target", type=float, default=0.91)
    p.add_argument("--seed", type=int, default=1337)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x_all, y_all = load("train")
    x_test, y_test = load("t10k")
    order = torch.randperm(len(x_all), generator=torch.Generator().manual_seed(args.seed))
    train_rows = order[5000:]
    batch = 128
    per_epoch = len(train_rows) // batch
    total = per_epoch * args.epochs
    warmup = min(100, total // 10)
    model = make_cnn()
    fused = {"fused": True} if int(torch.__version__.split(".")[0]) >= 2 else {}
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4, **fused)
    trained = 0.0
    reached = None
    epochs_log = []
    step = 0
    for epoch in range(args.epochs):
        perm = train_rows[torch.randperm(len(train_rows))]
        start = time.perf_counter()
        for b in range(per_epoch):
            rows = perm[b * batch:(b + 1) * batch]
            for g in opt.param_groups:
                g["lr"] = lr_at(step, warmup, total, 2e-3)
            loss = F.cross_entropy(model(x_all[rows]), y_all[rows])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
        trained += time.perf_counter() - start
        test = accuracy(model, x_test, y_test)
        epochs_log.append({"epoch": epoch + 1, "test_accuracy": test, "train_s": trained})
        if test >= args.target:
            reached = trained
            break
    print(json.dumps({"engine": f"torch{torch.__version__.split('.')[0]}", "torch_version": torch.__version__,
                      "threads": args.threads, "epochs": args.epochs, "target": args.target,
                      "seconds_to_target": reached, "epochs_run": epochs_log}))


if __name__ == "__main__":
    main()
