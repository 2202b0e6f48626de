#!/usr/bin/env bash
# A Hugging Face model of SmolLM-135M's shape (Llama: 30 layers, 576 wide,
# 9 heads with 3 KV heads, 49,152 tokens; random weights that
# tests/hf/make_fixtures.py --speed makes, cached outside the repository):
# Kiln against transformers on PyTorch 2, in one run, at each thread count.
#   BUILD_DIR=build bench/hf/run.sh [THREADS...]   (default: 1 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${BUILD_DIR:-build}"
PY="$(bench/torch2_venv.sh)"
MODEL="${KILN_HF_BENCH_MODEL:-$HOME/.cache/kiln-hf/smollm-135m-shape}"
[ -f "$MODEL/model.safetensors" ] || "$PY" tests/hf/make_fixtures.py --speed "$MODEL" >&2
P=128 N=64 R=3
echo "# $(date -u +%FT%TZ)  $(lscpu | sed -n 's/^Model name: *//p')  prompt $P tokens, $N new tokens, best of $R"
printf '| threads | engine | dtype | load s | first logits s | prompt tok/s | decode tok/s |\n|---|---|---|---|---|---|---|\n'
for threads in "${@:-1 2}"; do
  for threads_one in $threads; do
    row() { python3 -c "import json,sys; r=json.loads(sys.argv[1]); print('| $threads_one | %s | $1 | %.3f | %.3f | %.0f | %.1f |' % (r['engine'], r['load_s'], r['first_logits_s'], r['prefill_tokens_per_s'], r['decode_tokens_per_s']))" "$2"; }
    for dtype in f32 bf16; do
      row $dtype "$(OMP_NUM_THREADS=$threads_one "$BUILD_DIR/kiln_hf_bench" "$MODEL" $P $N $R $dtype)"
    done
    for dtype in float32 bfloat16; do
      row "$(echo $dtype | sed "s/float32/f32/; s/bfloat16/bf16/")" "$(OMP_NUM_THREADS=$threads_one "$PY" -c "import torch, runpy, sys; torch.set_num_threads($threads_one); sys.argv = ['peer', '$MODEL', '$P', '$N', '$R', '$dtype']; runpy.run_path('bench/hf/transformers_peer.py', run_name='__main__')" 2>/dev/null | tail -1)"
    done
  done
done
