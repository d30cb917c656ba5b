#!/usr/bin/env bash
# CI-side checks that dscore's files load in the real tools. Checkpoints: a
# 2-rank ZeRO-3 bf16 run saves, `dscore zero-to-fp32` consolidates, and the
# `safetensors` package reads both (check_safetensors.py). Monitors:
# `dscore run` trains a small model with the tensorboard, wandb and
# csv_monitor monitors on, then TensorBoard's EventAccumulator and wandb's own
# run-file reader and `wandb sync` read the files (check_tensorboard.py,
# check_wandb.py), with the csv_monitor rows of the same run as the expected
# values. Needs python3 with venv and network access to PyPI the first time
# (the venv is kept under build/ and reused while requirements.txt is
# unchanged); a failed install fails the script.
#
# Usage: tests/external/run_checks.sh <path to the dscore binary>
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 <dscore binary>" >&2; exit 2; }
dscore="$(realpath "$1")"
venv="${DSCORE_EXTERNAL_VENV:-$root/build/external-venv}"

want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
  echo "external checks: installing $(grep -v '^#' "$here/requirements.txt" | tr '\n' ' ')into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  if ! "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"; then
    rm -rf "$venv"
    echo "external checks: FAILED: pip could not install tests/external/requirements.txt" \
         "(no network or no PyPI access?); these checks are part of the test suite" >&2
    exit 1
  fi
  echo "$want" > "$venv/.requirements.sha256"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/monitors_config.json" "$work/"
if ! (cd "$work" && "$dscore" run --config monitors_config.json > run.log 2>&1); then
  cat "$work/run.log" >&2
  echo "external checks: FAILED: dscore run with the monitors on failed" >&2
  exit 1
fi
# (TensorBoard notes that TensorFlow is not installed: it does not need it.)
"$venv/bin/python" "$here/check_tensorboard.py" "$work/out/tb" "$work/out/csv"
"$venv/bin/python" "$here/check_wandb.py" "$work/out" "$work/out/csv" "$work/monitors_config.json" \
  dscore-ci dscore ci
cp "$here/checkpoint_config.json" "$work/"
if ! (cd "$work" && "$dscore" run --config checkpoint_config.json -n 2 > ck.log 2>&1 &&
      "$dscore" zero-to-fp32 ck hf --max-shard-size 2KB >> ck.log 2>&1); then
  cat "$work/ck.log" >&2
  echo "external checks: FAILED: dscore run with checkpoints, or zero-to-fp32, failed" >&2
  exit 1
fi
"$venv/bin/python" "$here/check_safetensors.py" "$work/ck" "$work/hf"
