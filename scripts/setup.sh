#!/usr/bin/env bash
# Install what dscore needs to build and test on Debian 12 (run as root).
# CUDA and NCCL are optional: the build detects them (nvcc on PATH). oneDNN
# (libdnnl-dev) is optional too (DSCORE_WITH_ONEDNN): the CPU bf16 GEMM.
set -euo pipefail
packages=(build-essential cmake ninja-build ccache git python3 python3-venv python3-pip python3-dev
          libboost-dev libboost-program-options-dev rapidjson-dev libtbb-dev
          libgtest-dev googletest openmpi-bin libopenmpi-dev clang clang-format libxxhash-dev
          libopenblas-dev pkg-config liburing-dev libpcre2-dev libsentencepiece-dev
          libdnnl-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
