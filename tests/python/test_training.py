# A training loop written in Python against `kiln train fashion-mlp`: the same
# seed and batches give the same losses, bit for bit, and the same test accuracy.
import json
import re
import subprocess

import numpy as np

import kiln
import kiln.nn.functional as F
from kiln import data, nn, optim

STEPS, BATCH, LR, SEED = 60, 128, 1e-3, 7


def python_mlp_run():
    """The recipe, step by step: its model, data order, AdamW and schedule."""
    kiln.manual_seed(SEED)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    opt = optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-4)
    train_set = data.FashionMNIST("train")
    train_rows, _ = data.split_indices(len(train_set), data.FASHION_MNIST_VALIDATION_SIZE)
    loader = data.ImageLoader(train_set, train_rows, batch_size=BATCH, drop_last=True, seed=SEED)
    warmup = min(100, STEPS // 10)
    losses = []
    for step in range(STEPS):
        x, y = loader.next()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.lr = optim.warmup_cosine_lr(step, warmup, STEPS, LR, LR * 0.02)
        opt.step()
        losses.append(loss.item())
    model.eval()
    right = seen = 0
    with kiln.no_grad():
        for x, y in data.ImageLoader(data.FashionMNIST("test"), batch_size=500, shuffle=False):
            right += int((np.asarray(kiln.argmax(model(x), 1)) == np.asarray(y)).sum())
            seen += len(y)
    return losses, right / seen


def test_python_loop_matches_the_recipe_bitwise(kiln_cli, tmp_path):
    out = subprocess.run([kiln_cli, "train", "fashion-mlp", "--steps", str(STEPS), "--seed", str(SEED), "--out",
                          str(tmp_path / "run"), "--no-progress"], capture_output=True, text=True, check=True).stdout
    cli_losses = [json.loads(line)["loss"] for line in open(tmp_path / "run" / "metrics.jsonl")
                  if json.loads(line)["kind"] == "train"]
    cli_accuracy = float(re.search(r"test accuracy: ([0-9.]+)", out).group(1))
    losses, accuracy = python_mlp_run()
    assert len(cli_losses) == STEPS
    assert losses == cli_losses  # bitwise: the same float64 of each step's float32 loss
    assert f"{accuracy:.4f}" == f"{cli_accuracy:.4f}"
    assert accuracy > 0.7
