#!/usr/bin/env python3
"""One SFT step's tokens/s on transformers (+ peft), the peer of kiln train sft
in bench/finetune/run.sh: the same model folder, the same batch of token ids
(every example exactly SEQ tokens, labels all counted), AdamW with
transformers' Trainer defaults and gradient clipping to 1, in f32, eager or
torch.compile'd. Prints one JSON line.
    sft_peer.py MODEL BATCH SEQ STEPS full|lora RANK eager|compiled
"""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    model_dir, batch, seq, steps, kind, rank, mode = sys.argv[1:8]
    batch, seq, steps, rank = int(batch), int(seq), int(steps), int(rank)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if kind == "lora":
        import peft
        model = peft.get_peft_model(model, peft.LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                                           target_modules=["q_proj", "v_proj"]))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    forward = torch.compile(model) if mode == "compiled" else model

    def step():
        loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()

    for _ in range(2):  # warm-up (and compilation)
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = time.perf_counter() - start
    print(json.dumps({"engine": f"transformers{'+peft' if kind == 'lora' else ''} {mode}",
                      "tokens_per_s": steps * batch * seq / seconds, "trainable": sum(p.numel() for p in params)}))


if __name__ == "__main__":
    main()
