#!/usr/bin/env bash
# DeepSpeed itself as the oracle (CPU accelerator, gloo): the same mlp
# problem trained by DeepSpeed and `dscore run` at ZeRO stages 0-3 on 1 and
# 2 ranks (check_training.py), the fp16 loss-scale trace against DeepSpeed's
# DynamicLossScaler (check_loss_scaler.py, through `dscore loss-scale`), and
# every LR scheduler against
# DeepSpeed's classes (check_lr_schedules.py).
#
# The venv (torch + deepspeed and everything they pull, ~5 GB, pinned in
# requirements.txt) is kept in build/deepspeed-venv and reused while requirements.txt is unchanged;
# DSCORE_ORACLE_VENV=<venv> uses an existing one instead (nothing is
# installed into it). DeepSpeed JIT-compiles its CPU Adam the first time
# (a few minutes): the build is kept in build/deepspeed-torch-extensions.
# Needs python3 with venv and headers (python3-dev), a C++ compiler and PyPI.
#
# Usage: tests/external/deepspeed/run_checks.sh <path to the dscore binary>
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 <dscore binary>" >&2; exit 2; }
dscore="$(realpath "$1")"

if [ -n "${DSCORE_ORACLE_VENV:-}" ]; then
  venv="$DSCORE_ORACLE_VENV"
  "$venv/bin/python" -c 'import deepspeed, torch' >/dev/null 2>&1 ||
    { echo "deepspeed checks: FAILED: DSCORE_ORACLE_VENV=$venv has no deepspeed/torch" >&2; exit 1; }
else
  venv="$root/build/deepspeed-venv"
  want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
    echo "deepspeed checks: installing tests/external/deepspeed/requirements.txt into $venv"
    start=$SECONDS
    rm -rf "$venv"
    python3 -m venv "$venv"
    if ! "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"; then
      rm -rf "$venv"
      echo "deepspeed checks: FAILED: pip could not install tests/external/deepspeed/requirements.txt" \
           "(no network or no PyPI access?); these checks are part of the test suite" >&2
      exit 1
    fi
    echo "$want" > "$venv/.requirements.sha256"
    echo "deepspeed checks: installed in $((SECONDS - start)) s"
  fi
fi

export DS_ACCELERATOR=cpu
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$root/build/deepspeed-torch-extensions}"
# Quiet the CPU-only torch: no CUDA is looked for, and DeepSpeed's info lines stay out of the log.
export CUDA_VISIBLE_DEVICES="" PYTHONWARNINGS=ignore
failed=0
for check in check_lr_schedules.py check_loss_scaler.py check_training.py; do
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
