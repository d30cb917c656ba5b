#!/usr/bin/env bash
# The checks against the real tools, run by scripts/test.sh: the monitors'
# files loaded by TensorBoard's EventAccumulator, wandb's run-file reader and
# `wandb sync` (tests/external), then DeepSpeed as the oracle and Hugging
# Face's libraries (tests/external/deepspeed, tests/external/hf). Needs the
# release build, python3 with venv (setup.sh installs it) and PyPI the first
# time; a failed install fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${DSCORE_SKIP_EXTERNAL:-0}" = "1" ]; then
  echo "test.sh: DSCORE_SKIP_EXTERNAL=1: tests/external (TensorBoard/wandb readers) NOT run" >&2
  exit 0
fi
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  echo "test.sh: WARNING: python3 with venv not found: tests/external NOT run" \
       "(apt-get install python3-venv python3-pip, as scripts/setup.sh does)" >&2
  exit 0
fi
bash tests/external/run_checks.sh build/release/bin/dscore
# DeepSpeed itself as the oracle (losses at ZeRO 0-3 on 1 and 2 ranks, the
# loss scaler, the LR schedules): torch + deepspeed from PyPI, CPU only.
if [ "${DSCORE_SKIP_DEEPSPEED:-0}" = "1" ]; then
  echo "test.sh: DSCORE_SKIP_DEEPSPEED=1: tests/external/deepspeed NOT run" >&2
  exit 0
fi
bash tests/external/deepspeed/run_checks.sh build/release/bin/dscore
# Hugging Face's libraries (same venv): from_pretrained, export-hf and the
# tokenizers against transformers, tokenizers and sentencepiece.
bash tests/external/hf/run_checks.sh build/release/bin/dscore
