#!/usr/bin/env bash
# Installs what Kiln needs from Debian 12's packages, skipping what is there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libopenblas-openmp-dev libgtest-dev nlohmann-json3-dev libcpp-httplib-dev libcli11-dev
  libdnnl-dev                             # oneDNN: CPU matrix products, direct convolutions, bf16
  libsentencepiece-dev zlib1g-dev
  libpcre2-dev                            # Unicode regexes of Hugging Face tokenizers' pre-tokenizers
  libutf8proc-dev                         # their NFC/NFKC/NFKD normalizers
  libopenmpi-dev openmpi-bin              # data- and pipeline-parallel training across processes and nodes
  libgloo-dev                             # the same without mpirun: torchrun-style launch over TCP
  clang-14 libclang-rt-14-dev             # libFuzzer, for the request-parsing fuzzer
  chromium chromium-driver wrk curl       # the serving page's browser test; load for the serving benchmark
  dataset-fashion-mnist fortunes          # the real data
  python3-torch python3-numpy             # PyTorch reference for parity tests and benchmarks
  python3-dev pybind11-dev libdlpack-dev python3-pytest  # import kiln: the extension module and its tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all Debian packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
