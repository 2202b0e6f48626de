#!/usr/bin/env bash
# launch_local.sh N CMD...: runs CMD as N ranks of one job on this machine,
# torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
# MASTER_ADDR=127.0.0.1, MASTER_PORT), waits for all of them and fails if any
# failed. MASTER_PORT is a port free right now (not one from the caller's
# environment), so tests run in parallel do not meet at the same rendezvous.
set -uo pipefail
n="${1:?usage: launch_local.sh N CMD...}"
shift
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')"
pids=()
for ((rank = 0; rank < n; rank++)); do
  RANK=$rank WORLD_SIZE=$n LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done
status=0
for ((rank = 0; rank < n; rank++)); do
  wait "${pids[$rank]}"
  code=$?
  if [ "$code" -ne 0 ]; then
    echo "launch_local: rank $rank exited with status $code" >&2
    status=1
  fi
done
exit $status
