#!/usr/bin/env bash
# Kiln as an installed library: `cmake --install` into a fresh prefix, then
# examples/ (a standalone project that find_package(Kiln)s it) built from
# another directory and run: it trains the MLP, and generates the same text
# as `kiln sample`; pkg-config finds kiln.pc; `kiln --version` is the C++ one.
source "$(dirname "$0")/lib.sh"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${KILN_BUILD_DIR:?set KILN_BUILD_DIR to the build folder}"
PREFIX="$WORK/prefix"

run 0 cmake --install "$BUILD" --prefix "$PREFIX"
for f in include/kiln/kiln.h include/kiln/core/tensor.h include/kiln/models/hf/hf_model.h \
         lib/cmake/Kiln/KilnConfig.cmake lib/cmake/Kiln/KilnConfigVersion.cmake lib/cmake/Kiln/KilnTargets.cmake \
         lib/pkgconfig/kiln.pc bin/kiln; do
  [ -e "$PREFIX/$f" ] || fail "the install has no $f"
done
version="$(sed -nE 's/^#define KILN_VERSION "(.*)"/\1/p' "$SRC/kiln/version.h")"
run 0 "$PREFIX/bin/kiln" --version
expect "^kiln $version$"

run 0 cmake -S "$SRC/examples" -B "$WORK/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX"
expect "Kiln $version from $PREFIX"
run 0 cmake --build "$WORK/examples"
run 0 "$WORK/examples/train_mlp" 300
expect "Kiln $version: an MLP of 101770 parameters"
accuracy="$(sed -nE 's/^test accuracy: ([0-9.]+)$/\1/p' "$OUT")"
python3 -c "import sys; sys.exit(0 if $accuracy > 0.7 else 1)" || fail "the example MLP reached $accuracy"
FIX="$SRC/tests/hf/fixtures/llama-gqa"
run 0 "$WORK/examples/generate" "$FIX" "The best way to predict" 12
cp "$OUT" "$WORK/example.txt"
run 0 "$KILN" sample "hf:$FIX" --prompt "The best way to predict" --temperature 0 --count 1 --max-tokens 12
[ "$(head -n 1 "$WORK/example.txt")" = "$(head -n 1 "$OUT")" ] || fail "the example generated $(cat "$WORK/example.txt")"

# pkg-config, for builds without CMake.
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
run 0 pkg-config --modversion kiln
expect "^$version$"
cat > "$WORK/v.cpp" <<'CPP'
#include <kiln/kiln.h>
#include <cstdio>
int main() { std::printf("%s %g\n", kiln::version(), kiln::sum(kiln::ones({2, 3})).item()); }
CPP
run 0 c++ -std=c++20 "$WORK/v.cpp" $(pkg-config --cflags --libs kiln) -o "$WORK/v"
run 0 "$WORK/v"
expect "^$version 6$"
echo "PASS"
