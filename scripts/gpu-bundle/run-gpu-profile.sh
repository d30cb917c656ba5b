#!/usr/bin/env bash
# One training step of bench/gpu/gpt_gpu (GPT-2 124M, bf16, ZeRO-0 unless
# told otherwise) under Nsight Compute, each kernel's time summed by kernel
# (kernel_times.py): where a step's GPU time goes. ncu runs the kernels one
# after another, so the total is the step's kernel time without overlap and
# without the gaps between kernels; the step time gpt_gpu prints without
# --profile, less this total, is roughly the GPU's idle time.
#
#   bash run-gpu-profile.sh [OUT_FILE] [gpt_gpu arguments]   # default: --stages 0
#
# Needs ncu on PATH (the lent machines have Nsight Compute, not Nsight Systems).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/dev/stdout}
[ $# -gt 0 ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--stages 0)
command -v ncu >/dev/null || { echo "run-gpu-profile: no ncu on PATH; nothing profiled"; exit 0; }
source "$here/bundle-env.sh"
report=$(mktemp -d "${TMPDIR:-/tmp}/dscore-ncu.XXXXXX")
trap 'rm -rf "$report"' EXIT
# Caches and clocks as they are in training: not flushed, not locked.
ncu --profile-from-start off --metrics gpu__time_duration.sum --cache-control none \
  --clock-control none -o "$report/step" -f \
  "$here/tree/bin/gpt_gpu" --steps 1 --no-offload --profile "${args[@]}" >"$report/run.log" 2>&1 ||
  { tail -30 "$report/run.log"; exit 1; }
ncu --import "$report/step.ncu-rep" --csv --page raw --metrics gpu__time_duration.sum >"$report/step.csv"
{
  grep -E '^gpt_gpu' "$report/run.log" || true
  python3 "$here/kernel_times.py" "$report/step.csv" --top 40
} >"$out"
