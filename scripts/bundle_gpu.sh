#!/usr/bin/env bash
# Builds Kiln with CUDA into build-gpu and gathers everything the GPU machine
# needs to run it into one folder, dist/gpu/ (gitignored via /dist/), packed
# as dist/gpu.tar.xz for the trip (run_on_device.sh unpacks it there):
#
#   dist/gpu/kiln, kiln_gpu_tests, kiln_tests, bench_* (if built)
#   dist/gpu/lib/   the shared libraries they need that are neither glibc nor
#                   part of the CUDA toolkit/driver (OpenBLAS + libgfortran +
#                   libquadmath, libgomp, SentencePiece, zlib, libstdc++ ...)
#
# Binaries get RUNPATH $ORIGIN/lib (then the usual CUDA toolkit folders, for
# libcudart/libcublas); bundled libraries get $ORIGIN. So the folder runs on a
# machine that has the CUDA toolkit and driver but none of Debian's -dev
# packages. Needs patchelf (Debian: apt-get install patchelf).
#
# The GPU machines are Hopper (sm_90), so the bundle build keeps only sm_90
# SASS (no PTX) and compresses the fat binaries: every binary carries the
# whole kernel library. What travels to the device is at most 64 MiB: the
# folder is about 85 MB (OpenBLAS alone is 37 MB), its xz archive about a
# quarter of that, and the archive is what must stay under the budget. Only bench targets named bench* (e.g. bench_gpu) are bundled; the
# CPU benchmark kiln_bench is not needed on the GPU machine.
#
# Usage: scripts/bundle_gpu.sh            (from anywhere; builds in <repo>/build-gpu)
#        BUILD_DIR=... DIST_DIR=... CUDA_ARCH=90-real scripts/bundle_gpu.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
DIST="${DIST_DIR:-$ROOT/dist/gpu}"
ARCH="${CUDA_ARCH:-90-real}"
LIMIT_MB="${BUNDLE_LIMIT_MB:-62}"  # MiB; the device runner carries at most 64 MiB

command -v patchelf >/dev/null || { echo "bundle_gpu.sh: patchelf not found; install it (apt-get install patchelf)" >&2; exit 1; }
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "bundle_gpu.sh: nvcc not found; the CUDA toolkit is needed to build the CUDA backend" >&2; exit 1; }
export PATH="$PATH:/usr/local/cuda/bin"

# cuDNN's fused attention needs its frontend's headers (PyPI, cached once);
# without them the bundle runs attention on Kiln's own kernels.
"$ROOT/scripts/cudnn_frontend.sh" >/dev/null || echo "bundle_gpu.sh: no cuDNN frontend headers; attention runs on Kiln's kernels" >&2

echo "== configure $BUILD (CUDA arch $ARCH)"
# -DKILN_DNNL=OFF: oneDNN (40 MB) speeds up CPU kernels only; the bundle is for the GPU.
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_DNNL=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_CUDA_FLAGS="-Xfatbin=-compress-all" >/dev/null

# Benchmarks are optional: build whatever bench targets the project defines.
BENCH_TARGETS=$(ninja -C "$BUILD" -t targets all 2>/dev/null | sed -n 's/^\(bench[A-Za-z0-9_]*\): .*EXECUTABLE.*/\1/p' | sort -u || true)
PROGRAMS="kiln kiln_tests kiln_gpu_tests ${BENCH_TARGETS}"
# DEVICE_ONLY=1: only what a device call carries (device_carry.sh drops the
# CPU-only binaries), sparing the CPU test binary's build after a header change.
[ "${DEVICE_ONLY:-0}" = 1 ] && PROGRAMS="kiln kiln_gpu_tests bench_gpu"
echo "== build ${PROGRAMS}"
ninja -C "$BUILD" ${PROGRAMS/kiln /kiln_cli }

rm -rf "$DIST"
mkdir -p "$DIST/lib"
BINS=()
for b in ${PROGRAMS}; do
  f="$BUILD/$b"
  [ -x "$f" ] || f="$(find "$BUILD" -maxdepth 3 -type f -name "$b" -perm -u+x | head -n1)"
  [ -n "$f" ] && [ -x "$f" ] || { echo "bundle_gpu.sh: built binary $b not found" >&2; exit 1; }
  cp "$f" "$DIST/$b"
  BINS+=("$DIST/$b")
done

# Libraries the machine provides itself: glibc, the dynamic loader, the CUDA
# driver and toolkit (too large to ship, and must match the driver).
is_system_lib() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libresolv.so*|libutil.so*) return 0 ;;
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libcudnn*|libnccl.so*|libcurand.so*|libnvidia-*|libnvrtc*|libnvJitLink*) return 0 ;;
  esac
  return 1
}

echo "== gather shared libraries"
for bin in "${BINS[@]}"; do
  # ldd lists the transitive closure: "libfoo.so.1 => /path/libfoo.so.1 (0x...)"
  ldd "$bin" | awk '/=>/ && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    is_system_lib "$name" && continue
    case "$path" in /usr/local/cuda*|/opt/nvidia*) continue ;; esac
    [ -e "$DIST/lib/$name" ] || cp -L "$path" "$DIST/lib/$name"
  done
done

echo "== strip and set RUNPATH"
CUDA_RPATH='/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib'
for bin in "${BINS[@]}"; do
  strip --strip-unneeded "$bin"
  patchelf --set-rpath "\$ORIGIN/lib:$CUDA_RPATH" "$bin"
done
for lib in "$DIST"/lib/*; do
  chmod u+w "$lib"
  strip --strip-unneeded "$lib" 2>/dev/null || true
  patchelf --set-rpath '$ORIGIN' "$lib"
done

# Sanity: every bundled binary resolves all non-CUDA libraries from the bundle.
missing=0
for bin in "${BINS[@]}"; do
  while read -r name _ path _; do
    if [ "$path" = "not" ] && ! is_system_lib "$name"; then
      echo "bundle_gpu.sh: $bin: $name not found" >&2
      missing=1
    fi
  done < <(ldd "$bin" | awk '/=>/ { print $1, $2, $3 }')
done
[ "$missing" = 0 ] || exit 1

ls -la "$DIST" "$DIST/lib"
echo "== pack $DIST.tar.xz"
XZ_OPT="-6 -T0" tar -C "$(dirname "$DIST")" -cJf "$DIST.tar.xz" "$(basename "$DIST")"
size_mb=$(( ($(stat -c %s "$DIST.tar.xz") + 1048575) / 1048576 ))
echo "== $DIST: $(du -sm "$DIST" | cut -f1) MB; $DIST.tar.xz: ${size_mb} MiB (carry this)"
if [ "$size_mb" -gt "$LIMIT_MB" ]; then
  echo "bundle_gpu.sh: the packed bundle is ${size_mb} MiB, over the ${LIMIT_MB} MiB budget" >&2
  exit 1
fi
