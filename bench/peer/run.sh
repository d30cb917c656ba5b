#!/usr/bin/env bash
# dscore's GPT against PyTorch + DeepSpeed on the same model, config and
# machine, in one run (bench/README.md#peer). For each row (1 rank ZeRO-0,
# 2 ranks ZeRO-0, 2 ranks ZeRO-3, bf16 at 1 rank ZeRO-0 and 2 ranks ZeRO-3)
# one ds_config.json is written and both `dscore run` and ds_train.py (under
# torchrun, DeepSpeed's CPU accelerator, gloo) train from it; a table of
# tokens/s, their ratio and the achieved FLOP/s against the machine's best
# fp32 GEMM rate measured in the same run follows.
#
# The venv is the one of tests/external/deepspeed (tests/external/deepspeed/
# venv.sh; DSCORE_ORACLE_VENV=<venv> uses an existing one). DeepSpeed's CPU
# ops (FusedAdam, shm comm) are JIT-built once into
# build/deepspeed-torch-extensions.
#
# --model llama fine-tunes a ~100M Llama-shaped model from a Hugging Face
# folder that transformers writes first (random weights) instead; --size
# 100m|350m|1b trains a larger GPT. Both sides run under /usr/bin/time -v:
# a second table gives their peak RSS beside dscore plan's.
#
# Usage: bench/peer/run.sh [--model gpt|llama] [--size 10m|100m|350m|1b] [--dscore build/release/bin/dscore] [--steps 5] [--warmup 2]
#                          [--rows z0-1,z0-2,z3-2,bf16-z0-1,bf16-z3-2] [--repeat 1] [--gemm-n 2048] [--keep]
# The rows z2-2, bf16-z2-2 (ZeRO-2) and z2-2-offload, bf16-z2-2-offload (ZeRO-2
# with "offload_optimizer": {"device": "cpu"} on both sides) run only when named in --rows.
# Needs: the release build of `dscore` and its plugins
#   (cmake --build --preset release --target dscore dscore_plugins), mpirun for -n 2,
#   /usr/bin/time for the memory table (Debian's `time`; without it the table says so).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../../tests/external/deepspeed/venv.sh
source "$root/tests/external/deepspeed/venv.sh"
deepspeed_venv "peer bench"
exec "$venv/bin/python" "$here/peer_bench.py" "$@"
