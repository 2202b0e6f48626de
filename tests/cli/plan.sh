#!/usr/bin/env bash
# kiln plan as a user runs it: the issue's cost example prints hours and
# money, --json is one parseable object, and the worked example in the
# README (GPT-2 XL on a 24 GB RTX 4090) names a plan that fits.
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
run 1 "$KILN" plan --preset gpt2 --gpu GTX-480
expect "unknown GPU 'GTX-480'"
echo "ok"
