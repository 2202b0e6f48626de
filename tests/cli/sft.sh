#!/usr/bin/env bash
# kiln train sft as a user runs it: LoRA and full fine-tuning of the fixture
# Llama and GPT-2 on JSON Lines, the peft and merged exports, resume, the
# run served to kiln score/sample, and bad input; peft loads Kiln's adapters
# and transformers the merged folder, with Kiln's log-probabilities (the
# PyTorch 2 environment, bench/torch2_venv.sh: required, tests/cli/lib.sh).
source "$(dirname "$0")/lib.sh"
FIX="$(cd "$(dirname "$0")/../hf/fixtures" && pwd)"
require_oracle peft transformers
TEXT="Still waters run deep, and so does the tax code."
DATA="$WORK/data"

run 0 "$KILN" data fortunes-sft --out "$DATA"
expect "fortunes-sft: [0-9]+ in train.jsonl, [0-9]+ in val.jsonl"
head -n 64 "$DATA/train.jsonl" > "$WORK/train.jsonl"
head -n 16 "$DATA/val.jsonl" > "$WORK/val.jsonl"

# LoRA on the Llama fixture: 1% of the weights train, and the validation loss goes down.
run 0 "$KILN" train sft --init "hf:$FIX/llama-gqa" --data "$WORK/train.jsonl" --val "$WORK/val.jsonl" --lora-rank 4 \
  --lora-targets all-linear --batch-size 8 --steps 12 --lr 3e-3 --no-progress --out "$WORK/lora" --stop-after 6
expect "LoRA rank 4 on 14 layers"
before="$(sed -nE 's/^validation loss before training: ([0-9.]+).*/\1/p' "$OUT")"
run 0 "$KILN" train sft --out "$WORK/lora" --resume --no-progress
expect "resumed from .*step_00000006"
after="$(sed -nE 's/^validation: +([0-9.]+) nats\/token$/\1/p' "$OUT")"
python3 -c "import sys; sys.exit(0 if $after < $before else 1)" || fail "validation loss $before -> $after"
run 0 "$KILN" export "$WORK/lora" --format peft --out "$WORK/lora-peft"
expect "PeftModel.from_pretrained"
run 0 "$KILN" export "$WORK/lora" --format hf --merge --out "$WORK/lora-merged"
run 1 "$KILN" export "$WORK/lora" --format hf --out "$WORK/unmerged"
expect "trained LoRA adapters: export them with --format peft, or merged into the base with --format hf --merge"
run 0 "$KILN" sample "$WORK/lora" --prompt "Fortune: " --count 1 --max-tokens 8
# --packing: the examples' tokens in rows of --max-seq-len.
run 0 "$KILN" train sft --init "hf:$FIX/llama-gqa" --data "$WORK/train.jsonl" --packing --max-seq-len 64 --batch-size 4 \
  --steps 2 --no-progress --out "$WORK/packed"
expect "[0-9]+ examples .*packed into [0-9]+ rows"
# --fit plans the fine-tuning step (LoRA on the frozen base, its dropout's
# masks too) into a budget, fresh and resumed.
run 0 "$KILN" train sft --init "hf:$FIX/llama-gqa" --data "$WORK/train.jsonl" --lora-rank 4 --lora-dropout 0.1 \
  --batch-size 8 --steps 2 --fit --memory-budget 3MiB --no-progress --out "$WORK/fit"
expect "--fit: fp32, checkpointing none, micro-batch [124] "
run 0 "$KILN" train sft --resume --steps 3 --fit --memory-budget 3MiB --no-progress --out "$WORK/fit"
expect "--fit: fp32, checkpointing none, micro-batch [124] "

# Kiln scores the run and its merged export alike.
run 0 "$KILN" score "$WORK/lora" --text "$TEXT" --json
cp "$OUT" "$WORK/lora.json"
run 0 "$KILN" score "hf:$WORK/lora-merged" --text "$TEXT" --json
cmp -s "$OUT" "$WORK/lora.json" || fail "the merged export scores differently from the run"

# Full fine-tuning of the GPT-2 fixture, and LoRA on it (peft's c_attn by default).
run 0 "$KILN" train sft --init "hf:$FIX/gpt2" --data "$WORK/train.jsonl" --batch-size 8 --steps 4 --no-progress \
  --out "$WORK/gpt2-full"
expect "training [0-9]+ \(100.00%\)"
run 1 "$KILN" export "$WORK/gpt2-full" --format peft --out "$WORK/nope"
expect "fine-tuned every weight and has no adapters"
run 0 "$KILN" export "$WORK/gpt2-full" --format hf --out "$WORK/gpt2-full-hf"
run 0 "$KILN" score "$WORK/gpt2-full" --text "$TEXT" --json
cp "$OUT" "$WORK/gpt2-full.json"
run 0 "$KILN" train sft --init "hf:$FIX/gpt2" --data "$WORK/train.jsonl" --lora-rank 4 --batch-size 8 --steps 4 \
  --lr 1e-2 --no-progress --out "$WORK/gpt2-lora"
expect "LoRA rank 4 on 2 layers"
run 0 "$KILN" export "$WORK/gpt2-lora" --format peft --out "$WORK/gpt2-lora-peft"
run 0 "$KILN" score "$WORK/gpt2-lora" --text "$TEXT" --json
cp "$OUT" "$WORK/gpt2-lora.json"

# Distillation: qwen2's fixture (the same tokenizer) teaches the Llama fixture; GPT-2's does not share it.
run 0 "$KILN" train sft --init "hf:$FIX/llama-gqa" --distill-from "hf:$FIX/qwen2" --distill-temperature 2 \
  --distill-alpha 0.5 --data "$WORK/train.jsonl" --val "$WORK/val.jsonl" --batch-size 8 --steps 3 --no-progress \
  --out "$WORK/distil"
expect "distilling .*qwen2 \(qwen2, [0-9]+ parameters, frozen\) into the model: temperature 2.0+, alpha 0.50*"
expect "validation: +[0-9.]+ nats/token"
run 1 "$KILN" train sft --init "hf:$FIX/llama-gqa" --distill-from "hf:$FIX/gpt2" --data "$WORK/train.jsonl" \
  --out "$WORK/x"
expect "does not share the student's tokenizer"
run 1 "$KILN" train sft --init "hf:$FIX/llama-gqa" --distill-alpha 0.3 --data "$WORK/train.jsonl" --out "$WORK/x"
expect "give the teacher with --distill-from"

# LoRA on a quantized base (QLoRA-style): the base in int4, the adapters f32; it
# learns, a resumed run ends where the uninterrupted one does, and the
# adapters merge into the unquantized base.
run 0 "$KILN" train sft --init "hf:$FIX/llama-gqa" --data "$WORK/train.jsonl" --val "$WORK/val.jsonl" --lora-rank 4 \
  --lora-targets all-linear --quantize-base int4 --batch-size 8 --steps 12 --lr 3e-3 --no-progress --out "$WORK/q4"
expect "parameters \(the base in int4\), training 6240"
before="$(sed -nE 's/^validation loss before training: ([0-9.]+).*/\1/p' "$OUT")"
after="$(sed -nE 's/^validation: +([0-9.]+) nats\/token$/\1/p' "$OUT")"
python3 -c "import sys; sys.exit(0 if $after < $before else 1)" || fail "quantized base: validation loss $before -> $after"
run 0 "$KILN" train sft --init "hf:$FIX/llama-gqa" --data "$WORK/train.jsonl" --val "$WORK/val.jsonl" --lora-rank 4 \
  --lora-targets all-linear --quantize-base int4 --batch-size 8 --steps 12 --lr 3e-3 --no-progress --out "$WORK/q4r" \
  --stop-after 5
run 0 "$KILN" train sft --out "$WORK/q4r" --resume --no-progress
expect "^validation: +$after nats/token$"
run 1 "$KILN" train sft --out "$WORK/q4r" --resume --steps 14 --quantize-base int8
expect "quantize-base differs from the resumed run's"
run 0 "$KILN" export "$WORK/q4" --format hf --merge --out "$WORK/q4-merged"
run 1 "$KILN" train sft --init "hf:$FIX/llama-gqa" --data "$WORK/train.jsonl" --quantize-base int8 --out "$WORK/x"
expect "give --lora-rank R too"
run 1 "$KILN" train sft --init "hf:$FIX/gpt2" --data "$WORK/train.jsonl" --lora-rank 4 --quantize-base int8 --out "$WORK/x"
expect "trains the Llama family"

# Bad input: a clear error, never a crash.
run 1 "$KILN" train sft --data "$WORK/train.jsonl" --out "$WORK/x"
expect "needs --init hf:DIR"
run 1 "$KILN" train sft --init "hf:$FIX/llama-gqa" --out "$WORK/x"
expect "needs --data FILE.jsonl"
printf '{"prompt": "a", "completion": "b"}\n{"prompt": "a"}\n' > "$WORK/bad.jsonl"
run 1 "$KILN" train sft --init "hf:$FIX/llama-gqa" --data "$WORK/bad.jsonl" --out "$WORK/x"
expect "bad.jsonl:2: no \"completion\" field"
run 1 "$KILN" train sft --init "hf:$FIX/llama-gqa" --data "$WORK/train.jsonl" --lora-alpha 16 --out "$WORK/x"
expect "give --lora-rank R too"
run 1 "$KILN" train sft --init "hf:$FIX/llama-gqa" --data "$WORK/train.jsonl" --lora-rank 4 --lora-targets c_attn \
  --out "$WORK/x"
expect "LoRA target 'c_attn' names no linear layer of this model"
run 1 "$KILN" train sft --init "hf:$FIX/llama-gqa" --data "$WORK/train.jsonl" --lora-from "$WORK" --out "$WORK/x"
expect "holds no adapter_config.json"

# Each check: BASE (peft ADAPTER | hf FOLDER) KILN_SCORES, all in one Python (transformers' import is most of a
# check's time).
run 0 "$ORACLE_PY" - "$FIX/llama-gqa" peft "$WORK/lora-peft" "$WORK/lora.json" \
  "$FIX/llama-gqa" hf "$WORK/lora-merged" "$WORK/lora.json" \
  "$FIX/gpt2" peft "$WORK/gpt2-lora-peft" "$WORK/gpt2-lora.json" \
  "$FIX/gpt2" hf "$WORK/gpt2-full-hf" "$WORK/gpt2-full.json" <<'PY'
import json, sys, warnings, torch
from transformers import AutoModelForCausalLM
args = sys.argv[1:]
for base, kind, folder, scores in zip(args[0::4], args[1::4], args[2::4], args[3::4]):
    kiln = json.load(open(scores))
    ids = torch.tensor([kiln["ids"]])
    if kind == "peft":
        from peft import PeftModel
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), folder)
        missing = [str(w.message) for w in caught if "missing" in str(w.message).lower() or "unexpected" in str(w.message).lower()]
        assert not missing, (folder, missing)
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        lp = torch.log_softmax(model.eval()(ids).logits[0, :-1].float(), -1).gather(1, ids[0, 1:, None])[:, 0]
    worst = max(abs(a - b) for a, b in zip(lp.tolist(), kiln["logprobs"][1:]))
    assert worst < 1e-4, (folder, worst)
    print(f"{kind} loads {folder} with Kiln's log-probabilities: largest difference {worst:.2e}")
PY
expect_lines 4 "largest difference"
echo "PASS"
