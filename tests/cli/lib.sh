# Helpers for the end-to-end tests of the kiln command (tests/cli_tests.cmake).
# Each scenario runs in a fresh directory, checks every command's exit status
# and greps its output; the first failed check ends the scenario with status 1.
set -uo pipefail

KILN="${KILN:?set KILN to the kiln binary}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kiln-cli-XXXXXX")"
# A failed check must not leave a background run (a test of a hung rank, a server) behind.
trap 'pkill -9 -f -- "--out $WORK/" 2>/dev/null; kill -9 $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
OUT="$WORK/last-output.txt"

fail() {
  echo "FAIL: $*" >&2
  echo "---- output of the last command:" >&2
  cat "$OUT" >&2
  exit 1
}

# run STATUS CMD...: runs CMD (stdout+stderr to $OUT), requires exit status STATUS.
run() {
  local want="$1"
  shift
  echo "+ $*" >&2
  "$@" >"$OUT" 2>&1
  local got=$?
  [ "$got" -eq "$want" ] || fail "'$*' exited with $got, expected $want"
}

# free_port: a TCP port nothing listens on now, on any interface (a
# test's server, or a rendezvous that binds them all).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

# wait_for_server PORT PID [SECONDS=120]: until the server answers /health;
# fails at once if it exits (its log, LOG, shown), and after SECONDS. (A
# server of many models takes tens of seconds to load on a busy 2-core CI.)
wait_for_server() {
  local port="$1" pid="$2" seconds="${3:-120}" log="${LOG:-}"
  for _ in $(seq $((seconds * 10))); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      [ -n "$log" ] && cp "$log" "$OUT"
      fail "the server exited before it answered /health"
    fi
    sleep 0.1
  done
  fail "the server did not answer /health within $seconds s"
}

# require_oracle MODULE...: sets ORACLE_PY to the PyTorch 2 environment's
# python (bench/torch2_venv.sh) where it imports every MODULE: the external
# reference this test checks Kiln against (transformers, peft, openai, ...).
# Missing, the test fails, naming what is missing and the command that makes
# it; it never passes without its oracle. KILN_ORACLES=optional (a
# developer's quick loop) skips instead (exit 77: ctest reports Skipped);
# scripts/test.sh always requires them.
require_oracle() {
  local venv="${KILN_TORCH2_VENV:-$HOME/.cache/kiln-torch2}"
  ORACLE_PY="$venv/bin/python"
  # Found, not imported: importing torch and transformers here would cost each test seconds more.
  "$ORACLE_PY" -c 'import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' \
    "$@" 2>/dev/null && return 0
  if [ "${KILN_ORACLES:-required}" = optional ]; then
    echo "SKIPPED: the PyTorch 2 environment $venv lacks $*, this test's reference (bench/torch2_venv.sh makes it)"
    exit 77
  fi
  echo "FAIL: this test checks Kiln against $*, but the PyTorch 2 environment $venv lacks it:" \
       "make it with bench/torch2_venv.sh (scripts/test.sh does), or point KILN_TORCH2_VENV at one" >&2
  exit 1
}

# expect REGEX: the last command's output matches (grep -E, across lines as given).
expect() {
  grep -Eq -- "$1" "$OUT" || fail "output does not match /$1/"
}

# expect_lines COUNT REGEX: the last command's output (shown) has COUNT lines
# matching: one per check a batched oracle script ran.
expect_lines() {
  cat "$OUT"
  [ "$(grep -Ec -- "$2" "$OUT")" -eq "$1" ] || fail "output has other than $1 lines matching /$2/"
}

# same_curve DIR_A DIR_B [STEPS] [BAR]: two runs' per-step train losses
# (metrics.jsonl) agree within BAR (1e-5), relative: distributed runs
# against one process.
same_curve() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "${3:-20}" "${4:-1e-5}" <<'PY' || fail "loss curves of $1 and $2 differ"
import json, sys
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if json.loads(l)["kind"] == "train"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == int(sys.argv[3]), (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"max relative loss difference {worst:.2e}")
assert worst < float(sys.argv[4]), worst
PY
}

# made_once COMMAND...: runs a command that makes a fixture in a cache, one
# at a time. Several tests make the same cached fixtures and ctest runs
# them in parallel: on a fresh machine the first suite run failed three of
# them (cli.hf_qwen2_chat, _tools, _reasoning), each making the vocabulary
# corpus while another was half-way through it. Under the lock, the first
# makes it and the others find it made.
made_once() {
  mkdir -p "$HOME/.cache"
  flock "$HOME/.cache/kiln-fixtures.lock" "$@"
}

# linked_copy SRC DST [FILE...]: DST holds links to SRC's files but the FILEs
# named (for the test to write its own: a config, a template).
linked_copy() {
  local src="$1" dst="$2" f
  shift 2
  mkdir -p "$dst"
  for f in "$src"/*; do ln -s "$f" "$dst/"; done
  for f in "$@"; do rm -f "$dst/$f"; done
}

# qwen2_chat_folder: sets MODEL to the Qwen2.5-Instruct-style folder
# (tests/hf/make_qwen2_folder.py: Qwen2's real vocabulary and template,
# tiny random weights), made once in a cache with the oracle's Python
# (require_oracle first).
qwen2_chat_folder() {
  local root vocabs src
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  vocabs="${KILN_VOCAB_CORPUS:-$HOME/.cache/kiln-vocabs}"
  MODEL="${KILN_QWEN2_FOLDER:-$HOME/.cache/kiln-hf/qwen2-chat}"
  src="$(made_once "$root/scripts/llama_cpp_source.sh")" || fail "could not get llama.cpp's sources"
  made_once "$ORACLE_PY" "$root/tests/hf/make_vocab_fixtures.py" "$src/models" "$vocabs" ||
    fail "could not make the vocabularies"
  made_once "$ORACLE_PY" "$root/tests/hf/make_qwen2_folder.py" "$vocabs" "$MODEL" || fail "could not make the Qwen2 folder"
}

# with_template DEST NAME: a copy of MODEL (qwen2_chat_folder first) carrying the real chat template NAME
# (tests/hf/fixtures/chat_templates/templates/NAME.jinja), its weights linked.
with_template() {
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  linked_copy "$MODEL" "$1" chat_template.jinja
  cp "$root/tests/hf/fixtures/chat_templates/templates/$2.jinja" "$1/chat_template.jinja"
}
