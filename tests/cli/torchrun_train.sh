#!/usr/bin/env bash
# Data-parallel training launched torchrun-style (RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT; no mpirun), over Gloo: the loss curve of 2 ranks
# (data parallel, or 2 pipeline stages of the GPT) matches one process, a rank that dies or hangs ends the other with an error
# naming the rank within --dist-timeout, the last checkpoint resumes, and a
# launch with a variable missing or a port taken says what to fix.
source "$(dirname "$0")/lib.sh"
require_oracle torch.distributed.run  # torchrun, below
LAUNCH="$(dirname "$0")/../distributed/launch_local.sh"
MLP_BASE=(train fashion-mlp --threads 1 --no-progress)
MLP=("${MLP_BASE[@]}" --steps 20 --batch-size 64)

run 0 "$KILN" "${MLP[@]}" --out "$WORK/one"
run 0 bash "$LAUNCH" 2 "$KILN" "${MLP[@]}" --out "$WORK/two"
expect "data parallel: 2 ranks over gloo"
[ "$(grep -c '^checkpoint:' "$OUT")" -eq 1 ] || fail "more than one rank printed the summary"
same_curve "$WORK/one" "$WORK/two"
# Pipeline stages over Gloo: the GPT in 2 stages follows one process too.
GPT=(train fortunes-gpt --steps 20 --n-layer 4 --n-embd 64 --n-head 4 --block-size 64 --batch-size 8 --threads 1
     --no-progress)
run 0 "$KILN" "${GPT[@]}" --out "$WORK/gpt-one"
run 0 bash "$LAUNCH" 2 "$KILN" "${GPT[@]}" --pipeline-stages 2 --out "$WORK/gpt-stages"
expect "pipeline parallel: 2 stages"
same_curve "$WORK/gpt-one" "$WORK/gpt-stages"
# torchrun itself (PyTorch 2's, from bench/torch2_venv.sh: required; Debian's 1.13 torchrun fails before
# starting anything): its agent keeps MASTER_PORT for its own store, and the ranks meet on the next port.
# So MASTER_PORT and the port after it must both be free (this test failed once in a clean-clone run,
# its output lost; a taken next port is one way it can).
free_port_pair() {
  python3 -c '
import socket
while True:
    a = socket.socket(); a.bind(("", 0)); p = a.getsockname()[1]
    try:
        socket.socket().bind(("", p + 1)); print(p); break
    except OSError:
        pass'
}
TORCHRUN="${TORCHRUN:-$(dirname "$ORACLE_PY")/torchrun}"
run 0 "$TORCHRUN" --nproc_per_node 2 --master_port "$(free_port_pair)" --no_python "$KILN" "${MLP[@]}" --out "$WORK/torchrun"
expect "data parallel: 2 ranks over gloo"
same_curve "$WORK/one" "$WORK/torchrun"
# Under a launcher with several ranks per node, --device cuda is the rank's own GPU, cuda:LOCAL_RANK
# (here, without a GPU or with one, cuda:1 cannot train: the error names it).
run 1 env LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 "$KILN" "${MLP_BASE[@]}" --steps 1 --device cuda --out "$WORK/gpu1"
expect "cuda:1"
# WORLD_SIZE=1 is a world of one.
run 0 env RANK=0 WORLD_SIZE=1 "$KILN" "${MLP_BASE[@]}" --steps 2 --batch-size 64 --out "$WORK/alone"
grep -q "data parallel" "$OUT" && fail "a world of one reported data parallelism"

# start_rank RANK PORT DIR: rank RANK of a 2-rank run in the background that
# checkpoints every 5 steps; its pid in RANK_PID, its output in DIR.RANK.txt.
start_rank() {
  RANK=$1 WORLD_SIZE=2 LOCAL_RANK=$1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$2 \
    "$KILN" "${MLP_BASE[@]}" --batch-size 64 --steps 100000 --checkpoint-every 5 --dist-timeout 5 --out "$3" \
    >"$3.$1.txt" 2>&1 &
  RANK_PID=$!
}
# start_job DIR: both ranks, once they have written a checkpoint at step 10.
start_job() {
  local port
  port="$(free_port)"
  start_rank 0 "$port" "$1"
  PID0=$RANK_PID
  start_rank 1 "$port" "$1"
  PID1=$RANK_PID
  for _ in $(seq 600); do
    # Past step 10 (only the last 3 checkpoints are kept, so look at the newest).
    last="$(ls -d "$1"/step_* 2>/dev/null | sort | tail -1)"
    [ -n "$last" ] && [ $((10#${last##*step_})) -ge 10 ] && return
    kill -0 "$PID0" 2>/dev/null || break
    sleep 0.1
  done
  cp "$1.0.txt" "$OUT"
  fail "the background run made no checkpoint"
}
# rank0_ends DIR WHAT: rank 0 exits with an error within 30 s (the timeout is
# 5 s); its output becomes the last command's.
rank0_ends() {
  timeout 30 tail --pid="$PID0" -f /dev/null || { cp "$1.0.txt" "$OUT"; fail "rank 0 did not end within 30 s of a rank $2"; }
  wait "$PID0" && { cp "$1.0.txt" "$OUT"; fail "rank 0 exited 0 after a rank $2"; }
  kill -9 "$PID1" 2>/dev/null
  wait "$PID1" 2>/dev/null
  cp "$1.0.txt" "$OUT"
}

# A rank killed mid-run: rank 0 sees its connection close and names it.
start_job "$WORK/killed"
kill -9 "$PID1"
rank0_ends "$WORK/killed" died
# Named when Gloo's message carries the dead rank's listening address (it
# sometimes gives the other end of the connection instead).
expect "rank 0 of 2: all-reduce .* did not complete: .*(Rank 1|Another rank) has died or hangs"
# A rank that hangs: rank 0 gives up after --dist-timeout.
start_job "$WORK/hung"
kill -STOP "$PID1"
rank0_ends "$WORK/hung" hung
expect "rank 0 of 2: all-reduce .* did not complete: .*Timed out.*has died or hangs \(the timeout is 5 s\)"
# The last complete checkpoint resumes.
last="$(ls -d "$WORK/killed"/step_* | sort | tail -1)"
step=$((10#${last##*step_}))
run 0 bash "$LAUNCH" 2 "$KILN" "${MLP_BASE[@]}" --batch-size 64 --steps $((step + 5)) --out "$WORK/killed" --resume
expect "resumed from .* at step $step"

# Launch mistakes.
run 1 env RANK=1 WORLD_SIZE=2 "$KILN" "${MLP[@]}" --out "$WORK/bad"
expect "RANK and WORLD_SIZE are set \(a torchrun-style launch\) but MASTER_ADDR is not"
run 1 env RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$KILN" "${MLP[@]}" --out "$WORK/bad"
expect "RANK=2 does not exist in WORLD_SIZE=2"
run 1 env RANK=1 WORLD_SIZE=2 MASTER_ADDR=no-such-host.invalid MASTER_PORT=29500 "$KILN" "${MLP[@]}" --out "$WORK/bad"
expect "rank 1 of 2: MASTER_ADDR 'no-such-host.invalid' does not resolve"
# A job short of a rank: the rendezvous gives up after --dist-timeout, names
# the rank that never came and what to check (it used to wait for ever).
port="$(free_port)"
run 1 timeout 60 env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
  "$KILN" "${MLP[@]}" --dist-timeout 3 --out "$WORK/bad"
expect "rank 0 of 2: 1 of 2 ranks arrived at the rendezvous 127.0.0.1:$port within 3 s; never arrived: rank 1\. "
expect "WORLD_SIZE=2.*MASTER_ADDR and MASTER_PORT.*firewall"
expect "warning: KILN_RENDEZVOUS_TOKEN is not set"
# A MASTER_ADDR where nothing answers (TEST-NET-1, never routed): bounded too.
run 1 timeout 60 env RANK=1 WORLD_SIZE=2 MASTER_ADDR=192.0.2.1 MASTER_PORT=29500 "$KILN" "${MLP[@]}" \
  --dist-timeout 3 --out "$WORK/bad"
expect "rank 1 of 2: could not reach the rendezvous at 192.0.2.1:29500 within 3 s"
# Ranks with different KILN_RENDEZVOUS_TOKENs: the stranger is refused.
port="$(free_port)"
KILN_RENDEZVOUS_TOKEN=job-a start_rank 0 "$port" "$WORK/token"
PID0=$RANK_PID
run 1 timeout 60 env KILN_RENDEZVOUS_TOKEN=job-b RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
  "$KILN" "${MLP[@]}" --dist-timeout 3 --out "$WORK/bad"
expect "rank 1 of 2: the rendezvous at 127.0.0.1:$port refused this rank: its KILN_RENDEZVOUS_TOKEN differs"
kill "$PID0"
wait "$PID0" 2>/dev/null
port="$(free_port)"
start_rank 0 "$port" "$WORK/waiting"  # listens on the port, waiting for rank 1
PID0=$RANK_PID
for _ in $(seq 100); do
  (: >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
run 1 env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" "$KILN" "${MLP[@]}" --out "$WORK/bad"
expect "rank 0 of 2: MASTER_PORT $port is already in use"
kill "$PID0"
wait "$PID0" 2>/dev/null
echo "ok"
