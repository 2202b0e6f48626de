#!/usr/bin/env bash
# Sentence embeddings' throughput, Kiln against sentence-transformers (PyTorch 2, bench/torch2_venv.sh) on the
# same folders, same threads, in one run: texts a second over N fortunes (one per line), interleaved rounds.
# Kiln's is `kiln embed --file` of N texts less that of one (its load and start-up left out), sentence-
# transformers' its encode() (batches of 32) after a warm-up. The models are random, of all-MiniLM-L6-v2's and
# embeddinggemma-300m's shapes (bench/hf/embed_peer.py make; kept in ~/.cache/kiln-hf).
#   BUILD_DIR=build [T=2] [N=512] [ROUNDS=2] bench/hf/embed_vs_sentence_transformers.sh [SHAPES...]
set -euo pipefail
cd "$(dirname "$0")/../.."
KILN="${BUILD_DIR:-build}/kiln"
PY="$(bench/torch2_venv.sh)"
T="${T:-2}" N="${N:-512}" ROUNDS="${ROUNDS:-2}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
python3 - "$N" >"$WORK/texts" <<'EOF'
import glob, sys
texts = []
for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
    if path.endswith(".dat") or "/off" in path:
        continue
    try:
        texts += [" ".join(t.split()) for t in open(path, encoding="utf-8").read().split("\n%\n") if t.strip()]
    except (UnicodeDecodeError, IsADirectoryError):
        pass
print("\n".join(texts[: int(sys.argv[1])]), end="")
EOF
head -1 "$WORK/texts" >"$WORK/one"
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
for shape in ${*:-minilm embeddinggemma}; do
  dir="$HOME/.cache/kiln-hf/embed-bench-$shape"
  [ -f "$dir/model.safetensors" ] || "$PY" bench/hf/embed_peer.py make "$dir" "$shape" >&2
  for round in $(seq "$ROUNDS"); do
    all=$(OMP_NUM_THREADS=$T seconds "$KILN" embed "hf:$dir" --file "$WORK/texts")
    one=$(OMP_NUM_THREADS=$T seconds "$KILN" embed "hf:$dir" --file "$WORK/one")
    kiln=$(echo "($N - 1) / ($all - $one)" | bc -l)
    peer=$(OMP_NUM_THREADS=$T "$PY" bench/hf/embed_peer.py time "$dir" "$WORK/texts" "$T" 2 2>/dev/null |
      python3 -c "import json, sys; print(json.load(sys.stdin)['texts_per_s'])")
    printf '%s round %s: Kiln %.1f texts/s, sentence-transformers %.1f, ratio %.2f\n' "$shape" "$round" "$kiln" \
      "$peer" "$(echo "$kiln / $peer" | bc -l)"
  done
done
