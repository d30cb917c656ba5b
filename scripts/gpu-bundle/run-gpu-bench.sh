#!/usr/bin/env bash
# Runs the GPU benches of a GPU bundle (scripts/gpu-bundle.sh) with the
# same libraries as run-gpu-tests.sh: bench/gpu_matmul_rate, the cuBLAS
# GEMM rate (bf16 and fp32) that GPU figures are read against.
#
#   bash run-gpu-bench.sh [gpu_matmul_rate arguments, e.g. --n 8192]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/bundle-env.sh"
"$here/tree/bin/gpu_matmul_rate" "$@"
