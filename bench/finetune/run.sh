#!/usr/bin/env bash
# kiln train sft's step speed against transformers (+ peft) on PyTorch 2,
# eager and compiled, in one run at each thread count: a SmolLM-135M-shaped
# Llama (random weights, tests/hf/make_fixtures.py --speed, cached outside
# the repository), full fine-tuning and LoRA rank 16 on q_proj and v_proj
# (peft's default), f32, batches of BATCH examples of exactly SEQ tokens.
# Kiln's tokens/s are its steady steps' (metrics.jsonl, the first two left
# out as the peer's warm-up is).
#   BUILD_DIR=build bench/finetune/run.sh [THREADS...]   (default: 2)
#   KILN_SFT_BENCH_BATCH (4), _SEQ (256), _STEPS (6)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${BUILD_DIR:-build}"
PY="$(bench/torch2_venv.sh)"
MODEL="${KILN_HF_BENCH_MODEL:-$HOME/.cache/kiln-hf/smollm-135m-shape}"
[ -f "$MODEL/config.json" ] || "$PY" tests/hf/make_fixtures.py --speed "$MODEL" >&2
B="${KILN_SFT_BENCH_BATCH:-4}" T="${KILN_SFT_BENCH_SEQ:-256}" S="${KILN_SFT_BENCH_STEPS:-6}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# Texts long enough that every example is cut to exactly T tokens.
python3 - "$WORK/data.jsonl" "$B" <<'PY'
import json, sys
text = open("/usr/share/games/fortunes/fortunes", encoding="utf-8", errors="replace").read()
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"text": text[i * 5000:(i + 1) * 5000]}) + "\n")
PY
echo "# $(date -u +%FT%TZ)  $(lscpu | sed -n 's/^Model name: *//p')  SmolLM-135M shape, f32, batch $B x $T tokens, $S steps"
printf '| threads | engine | trains | tokens/s | Kiln / this |\n|---|---|---|---|---|\n'
for threads in ${@:-2}; do
  for kind in full lora; do
    lora=()
    [ "$kind" = lora ] && lora=(--lora-rank 16)
    rm -rf "$WORK/run"
    "$BUILD_DIR/kiln" train sft --init "hf:$MODEL" --data "$WORK/data.jsonl" --max-seq-len "$T" --batch-size "$B" \
      --steps $((S + 2)) --threads "$threads" --no-progress --out "$WORK/run" "${lora[@]}" > "$WORK/kiln.log"
    kiln="$(python3 -c "
import json
steps = [json.loads(l) for l in open('$WORK/run/metrics.jsonl') if '\"train\"' in l][2:]
print(len(steps) * $T * $B / sum($B / s['items_per_s'] for s in steps))")"
    trains="$(sed -nE 's/.*training ([0-9]+) \(([0-9.]+)%\).*/\1 (\2%)/p' "$WORK/kiln.log")"
    printf '| %s | kiln %s | %s | %.0f | 1.00 |\n' "$threads" "$kind" "$trains" "$kiln"
    for mode in eager compiled; do
      peer="$(OMP_NUM_THREADS=$threads "$PY" -c "import torch, runpy, sys; torch.set_num_threads($threads); sys.argv = ['peer', '$MODEL', '$B', '$T', '$S', '$kind', '16', '$mode']; runpy.run_path('bench/finetune/sft_peer.py', run_name='__main__')" 2>/dev/null | tail -1)"
      python3 -c "
import json
r = json.loads('''$peer''')
print('| $threads | %s | %d | %.0f | %.2f |' % (r['engine'], r['trainable'], r['tokens_per_s'], $kiln / r['tokens_per_s']))"
    done
  done
done
