#!/usr/bin/env bash
# Pipeline-parallel training under mpirun: the GPT's blocks split into 2 and
# 4 stages, and 2 replicas x 2 stages, each follow one process's loss curve
# (relative difference under 1e-5 over 20 steps) and write the checkpoint
# one process writes (up to float rounding); ZeRO-1 combines with it, fp16's
# skipped steps agree across stages, a run resumes under another layout, bad
# layouts are clear errors, and a stage that hangs ends the job.
source "$(dirname "$0")/lib.sh"
MPIRUN="${MPIRUN:-mpirun}"

GPT_BASE=(train fortunes-gpt --n-layer 4 --n-embd 64 --n-head 4 --block-size 64 --batch-size 8 --threads 1
          --no-progress)
GPT=("${GPT_BASE[@]}" --steps 20)

# same_weights DIR_A DIR_B: the step-20 checkpoints hold the same tensors, equal up to float rounding.
same_weights() {
  python3 - "$1/step_00000020" "$2/step_00000020" <<'PY' || fail "checkpoints of $1 and $2 differ"
import array, json, struct, sys
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        out[name] = array.array("f", raw[8 + n + begin:8 + n + end])
    return out
for part in ("model", "optimizer"):
    a, b = (load(f"{d}/{part}.safetensors") for d in sys.argv[1:3])
    assert a.keys() == b.keys(), f"{part}: different tensors"
    worst = max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in a)
    print(f"{part}: max abs difference {worst:.1e}")
    assert worst < 1e-4, (part, worst)
PY
}

run 0 "$KILN" "${GPT[@]}" --out "$WORK/one"
cp "$OUT" "$WORK/one.out"
for layout in "2 2" "4 4" "4 2"; do
  read -r np stages <<<"$layout"
  dir="$WORK/np$np-s$stages"
  run 0 "$MPIRUN" -np "$np" "$KILN" "${GPT[@]}" --pipeline-stages "$stages" --out "$dir"
  expect "pipeline parallel: $stages stages, 1F1B over [0-9]+ micro-batches of [0-9]+; bubble \(S-1\)/\(M\+S-1\) = "
  [ "$(grep -c '^checkpoint:' "$OUT")" -eq 1 ] || fail "more than one rank printed the summary"
  # Balanced by FLOPs: the head (vocab 2048) outweighs a block, so the last of 2 stages holds one block.
  [ "$stages" = 2 ] && expect "pipeline stages .*: \[0, 3\) \[3, 4\)"
  same_curve "$WORK/one" "$dir"
  same_weights "$WORK/one" "$dir"
  # Rank 0 evaluates the whole model after training: the same validation loss.
  [ "$(grep '^validation:' "$OUT")" = "$(grep '^validation:' "$WORK/one.out")" ] || fail "validation differs"
done
expect "data parallel: 2 ranks over mpi"  # the last layout: 2 replicas x 2 stages

# ZeRO-1 on 2 replicas x 2 stages to step 20, then resumed on 4 stages to 25, against one process.
run 0 "$KILN" "${GPT_BASE[@]}" --steps 25 --out "$WORK/one-25"
run 0 "$MPIRUN" -np 4 "$KILN" "${GPT_BASE[@]}" --steps 25 --stop-after 20 --pipeline-stages 2 --zero 1 \
  --out "$WORK/relayout"
run 0 "$MPIRUN" -np 4 "$KILN" "${GPT_BASE[@]}" --steps 25 --pipeline-stages 4 --out "$WORK/relayout" --resume
expect "resumed from .* at step 20"
same_curve "$WORK/one-25" "$WORK/relayout" 25

# fp16 with a loss scale that overflows at first: every stage skips the same
# steps (they agree on each step's verdict), as one process does with the same micro-batches.
FP16=("${GPT[@]}" --precision fp16 --loss-scale 1e7 --micro-batch 1)
run 0 "$KILN" "${FP16[@]}" --out "$WORK/fp16-one"
skipped="$(grep -c 'skipped, inf/NaN' "$OUT")"
[ "$skipped" -gt 0 ] || fail "the fp16 run skipped no step: the test needs a loss scale that overflows"
run 0 "$MPIRUN" -np 4 "$KILN" "${FP16[@]}" --pipeline-stages 4 --out "$WORK/fp16-stages"
[ "$(grep -c 'skipped, inf/NaN' "$OUT")" = "$skipped" ] || fail "the stages skipped other steps than one process"
same_curve "$WORK/fp16-one" "$WORK/fp16-stages"

# Layouts that cannot work say why.
run 1 "$MPIRUN" -np 4 "$KILN" "${GPT[@]}" --pipeline-stages 3 --out "$WORK/bad"
expect "--pipeline-stages 3 does not divide the 4 ranks"
run 1 "$MPIRUN" -np 2 "$KILN" train fashion-mlp --steps 2 --threads 1 --pipeline-stages 2 --out "$WORK/bad-mlp"
expect "cannot be split into stages yet"
run 1 "$KILN" "${GPT[@]}" --pipeline-stages 2 --out "$WORK/bad-one"
expect "does not divide the 1 ranks"

# A stage that hangs: the other gives up after --dist-timeout and ends the job.
"$MPIRUN" -np 2 "$KILN" "${GPT_BASE[@]}" --steps 100000 --pipeline-stages 2 --dist-timeout 5 \
  --out "$WORK/hung" >"$OUT" 2>&1 &
JOB=$!
for _ in $(seq 600); do
  [ -s "$WORK/hung/metrics.jsonl" ] && break
  sleep 0.1
done
for pid in $(pgrep -f -- "--out $WORK/hung"); do
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && kill -STOP "$pid"
done
timeout 60 tail --pid="$JOB" -f /dev/null || fail "the job did not end within 60 s of a stage hanging"
wait "$JOB" && fail "the job exited 0 after a stage hung"
expect "rank 0 of 2: .* did not complete within 5 s; another rank has died or hangs"
echo "ok"
