#!/usr/bin/env bash
# Runs the GPU benches of a GPU bundle (scripts/gpu-bundle.sh) with the
# same libraries as run-gpu-tests.sh:
#   gpu_matmul_rate  the cuBLAS GEMM rate (bf16 and fp32) GPU figures are read against;
#   gpt_gpu          GPT-2 124M tokens/s and MFU at ZeRO 0/2/3, ZeRO-Offload's optimizer
#                    phase against the pinned PCIe and host memory rates, and (run
#                    with all three) ZeRO-3 with state and parameters on NVMe under
#                    $DSCORE_BENCH_NVME (default /tmp/dscore-gpt-gpu-nvme) against the disk;
#   fused_adam       the FusedAdam step against the device copy bandwidth.
#
#   bash run-gpu-bench.sh [gpu_matmul_rate | gpt_gpu | fused_adam] [its arguments]
#   bash run-gpu-bench.sh                # all three
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/bundle-env.sh"
if [ $# -gt 0 ]; then
  bench=$1
  shift
  "$here/tree/bin/$bench" "$@"
  exit
fi
failed=0
nvme=${DSCORE_BENCH_NVME:-/tmp/dscore-gpt-gpu-nvme}
for bench in gpu_matmul_rate gpt_gpu fused_adam; do
  echo "== $bench"
  args=()
  [ "$bench" = gpt_gpu ] && args=(--nvme "$nvme")
  "$here/tree/bin/$bench" "${args[@]}" || { echo "== $bench FAILED (exit $?)"; failed=1; }
done
rm -rf "$nvme"
exit $failed
