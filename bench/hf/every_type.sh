#!/usr/bin/env bash
# GGUF types, Kiln against llama.cpp on the same file (by default every type beside bench/hf/run.sh's
# five): prompt tokens/s (512 tokens) and decode tokens/s (64 after 128), two interleaved rounds, a ratio
# per round, and Kiln's decoding's share of the read bandwidth kiln_hf_bench measures. The files are the
# SmolLM-135M shape's (bench/hf/run.sh makes its folder and F32 file):
# convert_hf_to_gguf.py's F16/BF16, and llama-quantize's other types of the F32 file, made here once.
#   BUILD_DIR=build LLAMA_CPP=DIR [LLAMA_BUILD=build] [T=2] [ROUNDS=2] bench/hf/every_type.sh [TYPES...]
# KILN_HF_BENCH_MODEL names another shape's folder (bench/hf/run.sh's, with its F32 file beside it).
# AVX2: KILN_MAX_ISA=avx2 with LLAMA_BUILD naming a llama.cpp build made with
# -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF.
set -euo pipefail
cd "$(dirname "$0")/../.."
KILN_BENCH="${BUILD_DIR:-build}/kiln_hf_bench"
LLAMA_CPP="${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp source tree with build/bin/llama-bench and llama-quantize}"
BIN="$LLAMA_CPP/${LLAMA_BUILD:-build}/bin"
MODEL="${KILN_HF_BENCH_MODEL:-$HOME/.cache/kiln-hf/smollm-135m-shape}"
T="${T:-2}"
[ -f "$MODEL-f32.gguf" ] || { echo "run bench/hf/run.sh first: it makes $MODEL-f32.gguf" >&2; exit 1; }
types="${*:-f16 q4_1 q5_0 q5_1 q2_k q3_k_m q5_k_m q6_k iq4_nl iq4_xs}"
for type in $types; do
  file="$MODEL-$type.gguf"
  [ -f "$file" ] && continue
  if [ "$type" = f16 ] || [ "$type" = bf16 ]; then
    "$(bench/torch2_venv.sh)" "$LLAMA_CPP/convert_hf_to_gguf.py" "$MODEL" --outtype "$type" --outfile "$file" >&2
  else
    "$LLAMA_CPP/build/bin/llama-quantize" "$MODEL-f32.gguf" "$file" "${type^^}" >&2
  fi
done
kiln() {  # FILE PROMPT NEW KEY
  OMP_NUM_THREADS=$T "$KILN_BENCH" "$1" "$2" "$3" 3 gguf 2>/dev/null | tail -1 |
    python3 -c "import json, sys; print(json.load(sys.stdin)['$4'])"
}
# Decoding's tokens/s, and its share of the read bandwidth: the bytes a step reads, a second, over the probe's.
kiln_decode() {  # FILE
  OMP_NUM_THREADS=$T "$KILN_BENCH" "$1" 128 64 3 gguf 2>/dev/null | tail -1 | python3 -c "import json, sys
r = json.load(sys.stdin)
print(r['decode_tokens_per_s'], r['decode_tokens_per_s'] * (r['weight_bytes'] + r['kv_bytes_per_token']) / 1e9 / r['read_gbps'])"
}
llama() {  # FILE ARGS...
  local file="$1"
  shift
  "$BIN/llama-bench" -m "$file" "$@" -t "$T" -r 3 -o json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}
echo "# $(date -u +%FT%TZ)  $(lscpu | sed -n 's/^Model name: *//p')  $T threads  KILN_MAX_ISA=${KILN_MAX_ISA:-}"
for round in $(seq "${ROUNDS:-2}"); do
  for type in $types; do
    file="$MODEL-$type.gguf"
    kp="$(kiln "$file" 512 4 prefill_tokens_per_s)" lp="$(llama "$file" -p 512 -n 0)"
    read -r kd share < <(kiln_decode "$file")
    ld="$(llama "$file" -p 0 -n 64 -d 128)"
    python3 -c "print('round $round $type: prompt %.0f / %.0f = %.2f, decode %.1f / %.1f = %.2f (%.0f%% of the read bandwidth)' % ($kp, $lp, $kp / $lp, $kd, $ld, $kd / $ld, 100 * $share))"
  done
done
