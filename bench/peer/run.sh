#!/usr/bin/env bash
# dscore's GPT against PyTorch + DeepSpeed on the same model, config and
# machine, in one run (bench/README.md#peer). For each row (1 rank ZeRO-0,
# 2 ranks ZeRO-0, 2 ranks ZeRO-3, bf16 at 1 rank ZeRO-0 and 2 ranks ZeRO-3)
# one ds_config.json is written and both `dscore run` and ds_gpt.py (under
# torchrun, DeepSpeed's CPU accelerator, gloo) train from it; a table of
# tokens/s, their ratio and the achieved FLOP/s against torch's own fp32
# GEMM rate measured in the same run follows.
#
# The venv is the one of tests/external/deepspeed (the same pinned
# requirements.txt, kept in build/deepspeed-venv and reused while that file
# is unchanged); DSCORE_ORACLE_VENV=<venv> uses an existing one instead
# (nothing is installed into it). DeepSpeed's CPU ops (FusedAdam, shm comm)
# are JIT-built once into build/deepspeed-torch-extensions.
#
# Usage: bench/peer/run.sh [--dscore build/release/bin/dscore] [--steps 5] [--warmup 2]
#                          [--rows z0-1,z0-2,z3-2,bf16-z0-1,bf16-z3-2] [--repeat 1] [--gemm-n 2048] [--keep]
# Needs: the release build of `dscore` and its plugins
#   (cmake --build --preset release --target dscore dscore_plugins), mpirun for -n 2.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
requirements="$root/tests/external/deepspeed/requirements.txt"

if [ -n "${DSCORE_ORACLE_VENV:-}" ]; then
  venv="$DSCORE_ORACLE_VENV"
  "$venv/bin/python" -c 'import deepspeed, torch' >/dev/null 2>&1 ||
    { echo "peer bench: DSCORE_ORACLE_VENV=$venv has no deepspeed/torch" >&2; exit 1; }
else
  venv="$root/build/deepspeed-venv"
  want="$(sha256sum "$requirements" | cut -d' ' -f1)"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
    echo "peer bench: installing tests/external/deepspeed/requirements.txt into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    if ! "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"; then
      rm -rf "$venv"
      echo "peer bench: pip could not install $requirements (no network or no PyPI access?);" \
           "or point DSCORE_ORACLE_VENV at a venv with deepspeed and torch" >&2
      exit 1
    fi
    echo "$want" > "$venv/.requirements.sha256"
  fi
fi

export DS_ACCELERATOR=cpu
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$root/build/deepspeed-torch-extensions}"
# A CPU-only run: no CUDA is looked for, and Python's warnings stay out of the logs.
export CUDA_VISIBLE_DEVICES="" PYTHONWARNINGS=ignore
exec "$venv/bin/python" "$here/peer_bench.py" "$@"
