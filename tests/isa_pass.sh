#!/usr/bin/env bash
# isa_pass.sh LEVEL COMMAND...: runs COMMAND with Kiln capped at LEVEL
# (KILN_MAX_ISA), or exits 77 (ctest's skip) when LEVEL is not below this
# machine's own: the main pass already ran COMMAND there.
set -euo pipefail
level="$1"
shift
own="$("$KILN" info | sed -n 's/.*(this CPU: \([a-z0-9_]*\);.*/\1/p')"
order=(avx2 avx512 avx512_bf16 amx)
rank() { for i in "${!order[@]}"; do [ "${order[$i]}" = "$1" ] && echo "$i" && return; done; echo "unknown level $1" >&2; exit 2; }
if [ "$(rank "$level")" -ge "$(rank "$own")" ]; then
  echo "SKIPPED: this CPU's own level is $own; the main pass covers $level"
  exit 77
fi
export KILN_MAX_ISA="$level"
exec "$@"
