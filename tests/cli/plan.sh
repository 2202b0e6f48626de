#!/usr/bin/env bash
# kiln plan as a user runs it: the issue's cost example prints hours and
# money, --json is one parseable object, and the worked example in the
# README (GPT-2 XL on a 24 GB RTX 4090) names a plan that fits, and without
# a target it answers which GPU to pick.
source "$(dirname "$0")/lib.sh"
run 0 "$KILN" plan --preset gpt2 --tokens 10B --gpu H100
expect "gpt2, batch 8, 124.4M parameters, on H100-SXM"
expect "time: +[0-9.]+ hours"
expect "rent: +\\\$[0-9]+ at \\\$2.50 per GPU-hour"
expect "owning one GPU beats renting it after [0-9]+ GPU-hours"
run 0 "$KILN" plan --preset gpt2 --tokens 10B --gpu H100 --json
python3 -c "import json,sys; p=json.load(open('$OUT')); assert p['cost']['hours'] > 0 and p['best'] is not None, p['cost']" \
  || fail "--json is not one JSON object with a cost and a plan"
run 0 "$KILN" plan --preset gpt2-xl --batch-size 8 --gpu RTX-4090
expect "peak [0-9.]+ GiB: does NOT fit"
expect "<- fastest that fits"
run 2 "$KILN" plan --preset gpt2-xl --batch-size 8 --memory-budget 1GiB
expect "no combination fits"
# Which GPU? Without a target, one row per GPU of the table, then the picks.
run 0 "$KILN" plan fortunes-gpt --tokens 1B
expect "which GPU\?"
for gpu in H100-SXM A100-80GB RTX-4090 T4; do expect "^  $gpu .*(bf16|fp16|fp32), checkpointing"; done
expect "^by cost: [A-Z0-9-]+ \(\\\$[0-9.]+ to rent, "
expect "^by time: [A-Z0-9-]+ \("
run 0 "$KILN" plan --preset gpt2 --json
python3 -c "import json; p=json.load(open('$OUT')); assert len(p['choices']) >= 10 and p['cheapest'] and p['fastest'], p" \
  || fail "which GPU --json is not one object with a row per GPU and the picks"
run 2 "$KILN" plan --preset gpt2-xl --n-embd 16000 --batch-size 1
expect "no GPU in the table fits it"
# --gpus: the all-reduce is in the time, and the FLOPs per token are the field's.
run 0 "$KILN" plan --preset gpt2 --gpu A100-80GB --gpus 8 --tokens 10B --batch-size 64 --precision bf16
expect "on 8 GPUs, each with its own batch: the gradients' ring all-reduce \(474.7 MiB\)"
expect "compute: 0.855 GFLOP per token"
run 1 "$KILN" plan --preset gpt2 --gpu GTX-480
expect "unknown GPU 'GTX-480'"
# On a CPU without bf16 instructions (KILN_CPU_BF16=0 stands in for one),
# --precision bf16 trains in fp32, and the plan says so and predicts the
# peak the run then measures (weights, gradients, optimizer, activations).
export KILN_CPU_BF16=0
run 0 "$KILN" plan fashion-mlp --precision bf16 --batch-size 32 --micro-batch 32 --offload off --memory-budget 1GiB
expect "plain bf16 \(so fp32, on this CPU\) training needs"
expect "this CPU has no bf16 instructions, so --precision bf16 trains in fp32"
run 0 "$KILN" plan fashion-mlp --precision bf16 --batch-size 32 --micro-batch 32 --offload off --memory-budget 1GiB --json
cp "$OUT" "$WORK/plan.json"
run 0 "$KILN" train fashion-mlp --precision bf16 --batch-size 32 --steps 2 --no-progress --out "$WORK/bf16-run"
expect "training in fp32"
python3 - "$WORK/plan.json" "$WORK/bf16-run/metrics.jsonl" <<'PY' || fail "the plan's bf16 peak is not the fp32 run's"
import json, sys
plan = json.load(open(sys.argv[1]))
e = plan["estimates"][0]
assert e["precision"] == "bf16" and e["runs_as"] == "fp32", e
steps = [json.loads(l) for l in open(sys.argv[2]) if '"kind":"train"' in l]
peak = steps[0]["memory"]["cpu"]["peak"]
measured = sum(peak[k] for k in ("weights", "grads", "optimizer", "activations", "workspace"))
ratio = e["memory"]["peak"] / measured
print(f"plan {e['memory']['peak']} bytes, run {measured} bytes ({ratio:.4f})")
assert 0.99 <= ratio <= 1.01, ratio
PY
unset KILN_CPU_BF16
# A recipe whose step the planner does not run is refused, not planned as a GPT.
run 105 "$KILN" plan fortunes-classify --memory-budget 1GiB
expect "fortunes-classify not in \{fortunes-gpt,fashion-mlp,fashion-cnn,fashion-fast\}"
echo "ok"
