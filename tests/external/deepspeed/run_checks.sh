#!/usr/bin/env bash
# DeepSpeed itself as the oracle (CPU accelerator, gloo): the same mlp
# problem trained by DeepSpeed and `dscore run` at ZeRO stages 0-3 on 1 and
# 2 ranks, also with ZeRO-Offload at 1-3 (check_training.py), the fp16 loss-scale trace against DeepSpeed's
# DynamicLossScaler (check_loss_scaler.py, through `dscore loss-scale`), and
# every LR scheduler against
# DeepSpeed's classes (check_lr_schedules.py), DeepSpeed's own
# checkpoints imported and resumed (check_checkpoint_import.py), and dscore's
# exported for DeepSpeed to resume (check_checkpoint_export.py), and a
# Hugging Face Llama trained by DeepSpeed imported and resumed
# (check_llama_import.py), and DeepSpeed's pipeline engine against dscore's
# stages on the mlp (check_pipeline.py) and on a Hugging Face Llama
# (check_pipeline_llama.py), and DeepSpeed's AutoTP training against dscore's
# tensor parallelism on a Hugging Face Llama (check_tensor_parallel.py), and
# DeepSpeed's Ulysses (ALST) against dscore's sequence parallelism on it
# (check_sequence_parallel.py), and DeepSpeed-MoE's gating against dscore's
# MoE routing (check_moe_gating.py, through moe_gating_tool beside dscore),
# and DeepSpeed-MoE training the gpt with MoE blocks against dscore
# (check_moe_training.py), and DeepSpeed's AutoEP against dscore's expert
# parallelism on a Hugging Face Mixtral (check_expert_parallel.py), and
# DeepSpeed 0.19's Muon against dscore's at ZeRO 0-3 (check_muon.py).
#
# The venv and the CPU-only environment: venv.sh. DeepSpeed JIT-compiles
# its CPU Adam the first time (a few minutes): the build is kept in
# build/deepspeed-torch-extensions.
# Needs python3 with venv and headers (python3-dev), a C++ compiler and PyPI.
#
# Usage: tests/external/deepspeed/run_checks.sh <path to the dscore binary>
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 <dscore binary>" >&2; exit 2; }
dscore="$(realpath "$1")"

# shellcheck source=venv.sh
source "$here/venv.sh"
deepspeed_venv "deepspeed checks"
failed=0
for check in check_lr_schedules.py check_loss_scaler.py check_training.py check_checkpoint_import.py \
    check_checkpoint_export.py check_llama_import.py check_pipeline.py check_pipeline_llama.py \
    check_tensor_parallel.py check_sequence_parallel.py check_moe_gating.py \
    check_moe_training.py check_expert_parallel.py check_muon.py; do
  start=$SECONDS
  log="$(mktemp)"
  if ! "$venv/bin/python" "$here/$check" "$dscore" > "$log" 2>&1; then
    grep -v -E "^\[[0-9-]+ [0-9:,]+\] \[(INFO|WARNING)\]|^W[0-9]{4} " "$log" >&2 || true
    rm -f "$log"
    echo "deepspeed checks: FAILED: $check ($((SECONDS - start)) s)" >&2
    failed=1
    continue
  fi
  grep "^check_" "$log" || true
  rm -f "$log"
  echo "deepspeed checks: $check passed in $((SECONDS - start)) s"
done
exit $failed
