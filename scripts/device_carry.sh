#!/usr/bin/env bash
# Gathers what a device call carries beside the repository into .devdata/
# (ignored through .git/info/exclude; name it in the call's `carry`):
#   .devdata/dist/gpu.tar.xz   dist/gpu without the CPU-only binaries
#                              (kiln_tests, bench_serve_raw, bench_loadgen,
#                              bench_allreduce), to stay under 64 MiB a call
#   .devdata/fashion-mnist/    Debian's dataset-fashion-mnist (30 MB)
#   .devdata/fortunes/         Debian's fortunes (links kept, no .dat indexes)
# DATASETS (default "fashion-mnist fortunes") picks the datasets: with the
# repository at 18 MB and the bundle at 20, both no longer fit one call, so
# DATASETS=fortunes carries what fortunes-gpt and the resume check need.
# Run scripts/bundle_gpu.sh first. On the device:
#   mkdir -p dist && cp .devdata/dist/gpu.tar.xz dist/ &&
#   TRAIN=1 DATA_DIR=$PWD/.devdata OUT=$OUT scripts/run_on_device.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ -x dist/gpu/kiln_gpu_tests ] || { echo "device_carry.sh: no dist/gpu; run scripts/bundle_gpu.sh first" >&2; exit 1; }
grep -qx '/.devdata/' .git/info/exclude 2>/dev/null || echo '/.devdata/' >> .git/info/exclude
rm -rf .devdata && mkdir -p .devdata/dist
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp -r dist/gpu "$stage/gpu"
rm -f "$stage"/gpu/{kiln_tests,bench_serve_raw,bench_loadgen,bench_allreduce}
XZ_OPT="-6 -T0" tar -C "$stage" -cJf .devdata/dist/gpu.tar.xz gpu
for dataset in ${DATASETS:-fashion-mnist fortunes}; do
  case "$dataset" in
    fashion-mnist) cp -r /usr/share/datasets/fashion-mnist .devdata/ ;;
    fortunes) mkdir -p .devdata/fortunes && cp -a /usr/share/games/fortunes/. .devdata/fortunes/ && rm -f .devdata/fortunes/*.dat ;;
    *) echo "device_carry.sh: unknown dataset '$dataset' (fashion-mnist, fortunes)" >&2; exit 1 ;;
  esac
done
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n1 | cut -f1)
total_mib=$(( ($(du -sb .devdata | cut -f1) + tracked) / 1048576 ))
echo "device_carry.sh: .devdata $(du -sh .devdata | cut -f1), with the repository ${total_mib} MiB of the 64 a call carries"
[ "$total_mib" -lt 64 ] || { echo "device_carry.sh: over the 64 MiB a call carries; carry fewer datasets (DATASETS=fortunes)" >&2; exit 1; }
