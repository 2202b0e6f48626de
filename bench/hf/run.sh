#!/usr/bin/env bash
# A Hugging Face model of SmolLM-135M's shape (Llama: 30 layers, 576 wide,
# 9 heads with 3 KV heads, 49,152 tokens; random weights that
# tests/hf/make_fixtures.py --speed makes, cached outside the repository):
# Kiln against transformers on PyTorch 2 and, where it is built, llama.cpp,
# in one run, at each thread count: f32, bf16 and quantized weights (Kiln's
# int8 and int4 against llama.cpp's Q8_0 and Q4_0, which llama-quantize makes
# from its f32 GGUF; and Kiln on those same Q8_0, Q4_0 and Q4_K_M files). Kiln's rows also give the share of the measured memory
# read bandwidth a decoding step uses: (weight bytes + key and value bytes
# read per token) x tokens/s / bandwidth.
#   BUILD_DIR=build LLAMA_CPP=DIR bench/hf/run.sh [THREADS...]   (default: 1 2)
# KILN_HF_BENCH_SHAPE=tinyllama-1.1b (and a KILN_HF_BENCH_MODEL folder for it)
# makes and runs TinyLlama-1.1B's shape instead; KILN_HF_BENCH_PROMPT,
# _NEW and _REPEATS set the prompt's tokens (128), the tokens decoded (64)
# and the repeats (3); KILN_HF_BENCH_ENGINES the engines to run (default
# "kiln transformers llama.cpp").
# LLAMA_CPP: a llama.cpp source tree with build/bin/llama-bench (PyPI's
# llama-cpp-python source package carries one under vendor/llama.cpp).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${BUILD_DIR:-build}"
PY="$(bench/torch2_venv.sh)"
SHAPE="${KILN_HF_BENCH_SHAPE:-smollm-135m}"
MODEL="${KILN_HF_BENCH_MODEL:-$HOME/.cache/kiln-hf/$SHAPE-shape}"
LLAMA_CPP="${LLAMA_CPP:-}"
[ -f "$MODEL/config.json" ] || "$PY" tests/hf/make_fixtures.py --speed "$MODEL" --shape "$SHAPE" >&2
P="${KILN_HF_BENCH_PROMPT:-128}" N="${KILN_HF_BENCH_NEW:-64}" R="${KILN_HF_BENCH_REPEATS:-3}"
ENGINES=" ${KILN_HF_BENCH_ENGINES:-kiln transformers llama.cpp} "
echo "# $(date -u +%FT%TZ)  $(lscpu | sed -n 's/^Model name: *//p')  $SHAPE shape, prompt $P tokens, $N new tokens, best of $R"
printf '| threads | engine | weights | load s | first logits s | prompt tok/s | decode tok/s | decode share of bandwidth |\n|---|---|---|---|---|---|---|---|\n'
row() {  # THREADS DTYPE JSON
  python3 -c "
import json, sys
r = json.loads(sys.argv[3])
share = '%.0f%% of %.1f GB/s' % (100 * (r['weight_bytes'] + r['kv_bytes_per_token']) * r['decode_tokens_per_s'] / 1e9 / r['read_gbps'], r['read_gbps']) if 'read_gbps' in r else '-'
print('| %s | %s | %s | %.3f | %.3f | %.0f | %.1f | %s |' % (sys.argv[1], r['engine'], sys.argv[2], r['load_s'], r['first_logits_s'], r['prefill_tokens_per_s'], r['decode_tokens_per_s'], share))" "$@"
}
for threads in ${@:-1 2}; do
  [[ "$ENGINES" == *" kiln "* ]] && for dtype in f32 bf16 int8 int4; do
    row "$threads" $dtype "$(OMP_NUM_THREADS=$threads "$BUILD_DIR/kiln_hf_bench" "$MODEL" $P $N $R $dtype)"
  done
  [[ "$ENGINES" == *" transformers "* ]] && for dtype in float32 bfloat16; do
    row "$threads" "$(echo $dtype | sed 's/float32/f32/; s/bfloat16/bf16/')" \
      "$(OMP_NUM_THREADS=$threads "$PY" -c "import torch, runpy, sys; torch.set_num_threads($threads); sys.argv = ['peer', '$MODEL', '$P', '$N', '$R', '$dtype']; runpy.run_path('bench/hf/transformers_peer.py', run_name='__main__')" 2>/dev/null | tail -1)"
  done
  [[ "$ENGINES" == *" llama.cpp "* && -x "$LLAMA_CPP/build/bin/llama-bench" ]] || continue
  for dtype in f32 bf16 q8_0 q4_0 q4_k_m; do
    gguf="$MODEL-$dtype.gguf"
    [ -f "$MODEL-f32.gguf" ] || "$PY" "$LLAMA_CPP/convert_hf_to_gguf.py" "$MODEL" --outtype f32 --outfile "$MODEL-f32.gguf" >&2
    case $dtype in
      bf16) [ -f "$gguf" ] || "$PY" "$LLAMA_CPP/convert_hf_to_gguf.py" "$MODEL" --outtype bf16 --outfile "$gguf" >&2 ;;
      q*) [ -f "$gguf" ] || "$LLAMA_CPP/build/bin/llama-quantize" "$MODEL-f32.gguf" "$gguf" "${dtype^^}" >&2 ;;
    esac
    # llama-bench's prompt test (pp) is one batch of P tokens into an empty
    # cache; its decoding test (tg) decodes N tokens after P already in the
    # cache (-d), as Kiln's rows decode after their prompt. No load times.
    pp="$("$LLAMA_CPP/build/bin/llama-bench" -m "$gguf" -p $P -n 0 -t "$threads" -r $R -o json 2>/dev/null)"
    tg="$("$LLAMA_CPP/build/bin/llama-bench" -m "$gguf" -p 0 -n $N -d $P -t "$threads" -r $R -o json 2>/dev/null)"
    python3 -c "
import json, sys
pp, tg = json.loads(sys.argv[1])[0]['avg_ts'], json.loads(sys.argv[2])[0]['avg_ts']
print('| $threads | llama.cpp (llama-bench) | $dtype | - | - | %.0f | %.1f | - |' % (pp, tg))" "$pp" "$tg"
    # Kiln on the same file (gguf:FILE), its quantized types kept as they are.
    [[ "$ENGINES" == *" kiln "* && $dtype == q* ]] &&
      row "$threads" "$dtype (the GGUF)" "$(OMP_NUM_THREADS=$threads "$BUILD_DIR/kiln_hf_bench" "$gguf" $P $N $R gguf)"
  done
done
