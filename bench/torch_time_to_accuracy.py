"""Time to accuracy in PyTorch with one of Kiln's image recipes, for
bench/time_to_accuracy.sh. "The same recipe" covers:

- the model: fashion-fast (conv 1->16, pool, conv 16->32, pool, 256, 10) or
  fashion-cnn (conv 1->32, pool, conv 32->64, pool, 128, dropout 0.25, 10);
- the data, image for image and batch for batch: Debian's
  dataset-fashion-mnist, the same 5,000 training images held out and the
  same shuffled order every epoch (Kiln's splitmix64 permutations, recomputed
  here), normalised with mean 0.2860 and std 0.3530, batch 128 with the last
  partial batch dropped;
- the optimizer: AdamW (the recipe's learning rate, weight decay 1e-4,
  PyTorch 2's fused CPU kernel), a linear warmup over min(100, steps/10)
  steps, then cosine decay to 2% of the peak;
- the clock: it tests on the 10,000 test images every --eval-every steps
  (and at the end) and counts training steps only, as
  `kiln train --target-accuracy --eval-every` does.

PyTorch's own initialisation is used (Kiln's has the same scheme, drawn from
another random stream), so the two runs do not start from identical weights.
Prints one JSON line.
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
MASK = (1 << 64) - 1
SPLIT_SEED = 0x6B696C6E53504C54  # kiln/data/splits.h: kSplitSeed
LEARNING_RATE = {"fashion-fast": 5e-3, "fashion-cnn": 2e-3}


# kiln/data/random.h, in Python integers.
def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def derive_seed(seed, stream):
    return mix64(mix64(seed) ^ ((stream + 0x9E3779B97F4A7C15) & MASK))


def seeded_permutation(n, seed):
    p = list(range(n))
    state = seed
    for i in range(n - 1, 0, -1):
        bound = i + 1
        threshold = ((1 << 64) - bound) % bound
        while True:
            state = (state + 0x9E3779B97F4A7C15) & MASK
            r = mix64(state)
            if r >= threshold:
                break
        j = r % bound
        p[i], p[j] = p[j], p[i]
    return p


def kiln_split(n, n_validation):
    p = seeded_permutation(n, derive_seed(SPLIT_SEED, 1))
    return sorted(p[n_validation:])


def kiln_epoch_order(n, seed, epoch):
    return seeded_permutation(n, derive_seed(derive_seed(seed, 2), epoch))


def load(kind):
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STD
    return x, torch.from_numpy(labels.astype(np.int64))


def make_model(recipe):
    if recipe == "fashion-fast":
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(32 * 7 * 7, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def lr_at(step, warmup, total, peak, floor_ratio=0.02):  # kiln/optim: warmup_cosine_lr
    if warmup > 0 and step < warmup:
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
    p.add_argument("--recipe", choices=sorted(LEARNING_RATE), default="fashion-fast")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--eval-every", type=int, default=0, help="test every N steps (0: after every epoch)")
    p.add_argument("--target", type=float, default=0.91)
    p.add_argument("--seed", type=int, default=1337, help="the data order's seed, as kiln train --seed")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x_all, y_all = load("train")
    x_test, y_test = load("t10k")
    train_rows = torch.tensor(kiln_split(len(x_all), 5000))
    batch = 128
    per_epoch = len(train_rows) // batch
    total = per_epoch * args.epochs
    warmup = min(100, total // 10)
    test_every = args.eval_every or per_epoch
    peak = LEARNING_RATE[args.recipe]
    model = make_model(args.recipe)
    fused = {"fused": True} if int(torch.__version__.split(".")[0]) >= 2 else {}
    opt = torch.optim.AdamW(model.parameters(), lr=peak, weight_decay=1e-4, **fused)
    trained = 0.0
    reached = None
    tests = []
    step = 0
    for epoch in range(args.epochs):
        order = train_rows[torch.tensor(kiln_epoch_order(len(train_rows), args.seed, epoch))]
        start = time.perf_counter()
        for b in range(per_epoch):
            rows = order[b * batch:(b + 1) * batch]
            for g in opt.param_groups:
                g["lr"] = lr_at(step, warmup, total, peak)
            loss = F.cross_entropy(model(x_all[rows]), y_all[rows])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step % test_every == 0 or step == total:
                trained += time.perf_counter() - start
                test = accuracy(model, x_test, y_test)
                tests.append({"step": step, "test_accuracy": test, "train_s": trained})
                if test >= args.target:
                    reached = trained
                    break
                start = time.perf_counter()
        else:
            trained += time.perf_counter() - start
            continue
        break
    print(json.dumps({"engine": f"torch{torch.__version__.split('.')[0]}", "torch_version": torch.__version__,
                      "recipe": args.recipe, "threads": args.threads, "epochs": args.epochs,
                      "target": args.target, "seconds_to_target": reached, "tests": tests}))


if __name__ == "__main__":
    main()
