#!/usr/bin/env bash
# Data parallelism on this machine: (1) scaling efficiency, 1 rank vs 2 ranks
# at the same global batch, 1 thread per rank, from each run's metrics.jsonl
# (median items/s after 3 warm-up steps), and the GPT as 2 pipeline stages
# instead of 2 replicas; (2) all-reduce bus bandwidth,
# Kiln's communicator against raw MPI, 2 ranks.
#
#   bench/distributed/scaling.sh            # STEPS=30
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KILN="${KILN:-$ROOT/build/kiln}"
STEPS="${STEPS:-30}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kiln-dp-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
declare -A ARGS=(
  [mlp]="train fashion-mlp --batch-size 256"
  [gpt]="train fortunes-gpt --n-layer 4 --n-embd 128 --n-head 4 --block-size 128 --batch-size 16"
)
for model in mlp gpt; do
  for np in 1 2; do
    launcher=()
    [ "$np" -gt 1 ] && launcher=(mpirun -np "$np")
    "${launcher[@]}" "$KILN" ${ARGS[$model]} --steps "$STEPS" --threads 1 --no-progress --out "$WORK/$model-$np" \
      >"$WORK/$model-$np.log" 2>&1
  done
done
# The GPT as 2 pipeline stages on 2 ranks instead of 2 data-parallel replicas.
mpirun -np 2 "$KILN" ${ARGS[gpt]} --steps "$STEPS" --threads 1 --no-progress --pipeline-stages 2 \
  --out "$WORK/gpt-pipeline-2" >"$WORK/gpt-pipeline-2.log" 2>&1
/usr/bin/python3 - "$WORK" <<'PY'
import json, statistics, sys
work = sys.argv[1]
def rate(run):
    lines = [json.loads(l) for l in open(f"{work}/{run}/metrics.jsonl")]
    return statistics.median(l["items_per_s"] for l in lines if l["kind"] == "train" and l["step"] > 3)
print("| model | 1 rank (items/s) | 2 ranks (items/s) | speedup | scaling efficiency |")
print("|---|---:|---:|---:|---:|")
for model in ["mlp", "gpt"]:
    one, two = rate(f"{model}-1"), rate(f"{model}-2")
    print(f"| {model} | {one:,.0f} | {two:,.0f} | {two / one:.2f}x | {two / one / 2:.0%} |")
one, two = rate("gpt-1"), rate("gpt-pipeline-2")
print(f"| gpt, 2 pipeline stages | {one:,.0f} | {two:,.0f} | {two / one:.2f}x | {two / one / 2:.0%} |")
PY
mpirun -np 2 "$ROOT/build/bench_allreduce"
echo "(1 thread per rank, $STEPS steps; $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg))"
