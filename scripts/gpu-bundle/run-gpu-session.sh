#!/usr/bin/env bash
# A lent GPU's checks in one call, in the order they matter, each under a
# time limit, with whole logs in one folder (the device tool returns up to
# 8 files): the gpu tests (run-gpu-tests.sh, every executable's output in
# tests.log), then the benches (run-gpu-bench.sh): the cuBLAS rate,
# FusedAdam against the copy bandwidth and torch's fused AdamW, and GPT-2
# 124M at ZeRO 0/2/3, with ZeRO-Offload, and at ZeRO-0 with the unfused
# attention; then one GPT step's kernels under
# Nsight Compute (run-gpu-profile.sh, kernels.txt), then GPT-2 with NVMe.
# Prints a summary last. About 6 minutes on an H100 (2026-11-27) before
# the profile was added. A device call stops at 600 s, and what is under
# OUT comes back even then: hence this order, most important first,
# summary.txt written as each part ends, and a deadline for the whole.
#
#   bash run-gpu-session.sh [OUT]     # OUT defaults to $OUT, else ./gpu-session
#
# Environment: DSCORE_GPU_SESSION_SECONDS (the whole session, default 540:
# a device call stops at 600 s, and a lease may hold no more than one
# call), DSCORE_GPU_SESSION_TEST_SECONDS (the tests' share of it, default
# 300), DSCORE_GPU_TEST_TIMEOUT (per test executable, default 240 s here),
# DSCORE_GPT_GPU_STEPS (default 5). Each part runs under the smaller of its
# own limit and what the session has left; a part with less than 20 s left
# is not started, and the summary says so.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-$PWD/gpu-session}}
mkdir -p "$out"
nvidia-smi -L 2>&1 | tee "$out/summary.txt"
deadline=$(($(date +%s) + ${DSCORE_GPU_SESSION_SECONDS:-540}))
within() {  # within SECONDS: SECONDS, or what the session has left if less
  local left=$((deadline - $(date +%s) - 5))
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

: >"$out/tests.log"
DSCORE_GPU_TEST_DEADLINE=$(($(date +%s) + $(within "${DSCORE_GPU_SESSION_TEST_SECONDS:-300}"))) \
  DSCORE_GPU_TEST_TIMEOUT=${DSCORE_GPU_TEST_TIMEOUT:-240} DSCORE_GPU_TEST_LOG=$out/tests.log \
  bash "$here/run-gpu-tests.sh" >"$out/tests-summary.log" 2>&1
echo "== tests (exit $?)" >>"$out/summary.txt"
grep -E '^(PASS|FAIL|SKIP|NOT RUN|summary)' "$out/tests-summary.log" >>"$out/summary.txt"

bench() {  # bench LOG SECONDS BENCH ARGS...
  local log=$1 seconds
  seconds=$(within "$2")
  shift 2
  if [ "$seconds" -lt 20 ]; then
    echo "== $log: not started (the session's deadline)" | tee "$out/$log.log" >>"$out/summary.txt"
    return
  fi
  timeout -k 5 "$seconds" bash "$here/run-gpu-bench.sh" "$@" >"$out/$log.log" 2>&1
  echo "== $log (exit $?, limit $seconds s)" >>"$out/summary.txt"
  grep -v '^\[dscore' "$out/$log.log" | tail -30 >>"$out/summary.txt"
}
bench gpu_matmul_rate 60 gpu_matmul_rate
python=$(command -v python3 || true)
bench fused_adam 120 fused_adam ${python:+--torch "$python"}
bench gpt_gpu 300 gpt_gpu --steps "${DSCORE_GPT_GPU_STEPS:-5}" --partial 0.5
# ZeRO-0 again with the cuBLAS attention, beside the fused one (the default).
# Its log goes into gpt_gpu.log, keeping to eight files.
(export DSCORE_CUDA_ATTENTION=unfused
 bench gpt_gpu_unfused 120 gpt_gpu --steps "${DSCORE_GPT_GPU_STEPS:-5}" --stages 0 --no-offload)
{ echo "== DSCORE_CUDA_ATTENTION=unfused"; cat "$out/gpt_gpu_unfused.log"; } >>"$out/gpt_gpu.log"
rm -f "$out/gpt_gpu_unfused.log"
echo "== kernels of one ZeRO-0 step (the whole table in kernels.txt)" >>"$out/summary.txt"
profile_seconds=$(within 180)
if [ "$profile_seconds" -ge 20 ]; then
  timeout -k 5 "$profile_seconds" bash "$here/run-gpu-profile.sh" "$out/kernels.txt" \
    >>"$out/summary.txt" 2>&1
  echo "(exit $?)" >>"$out/summary.txt"
  head -16 "$out/kernels.txt" >>"$out/summary.txt" 2>/dev/null
else
  echo "not started (the session's deadline)" >>"$out/summary.txt"
fi
nvme=$(mktemp -d "${TMPDIR:-/tmp}/dscore-gpt-gpu-nvme.XXXXXX")
bench gpt_gpu_nvme 180 gpt_gpu --steps 2 --stages none --no-offload --nvme "$nvme"
rm -rf "$nvme"
cat "$out/summary.txt"
