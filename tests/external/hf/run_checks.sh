#!/usr/bin/env bash
# Hugging Face's own libraries as the reference for dscore's Hugging Face
# face: transformers builds tiny GPT-2 and Llama models and saves them with
# save_pretrained, `tokenizers` and `sentencepiece` train small tokenizers;
# dscore loads them (from_pretrained, its tokenizers), trains, exports with
# `dscore export-hf`, and transformers loads the export back. Every
# check_*.py in this folder runs, each given the dscore binary and a scratch
# folder of its own.
#
# The venv (torch, transformers, tokenizers, sentencepiece, pinned in
# tests/external/deepspeed/requirements.txt) and the CPU-only environment:
# tests/external/deepspeed/venv.sh.
#
# Usage: tests/external/hf/run_checks.sh <path to the dscore binary>
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 <dscore binary>" >&2; exit 2; }
dscore="$(realpath "$1")"

# shellcheck source=../deepspeed/venv.sh
source "$here/../deepspeed/venv.sh"
deepspeed_venv "hf checks"
failed=0
ran=0
for check in "$here"/check_*.py; do
  [ -e "$check" ] || continue
  ran=$((ran + 1))
  name="$(basename "$check")"
  start=$SECONDS
  log="$(mktemp)"
  scratch="$(mktemp -d)"
  if ! "$venv/bin/python" "$check" "$dscore" "$scratch" > "$log" 2>&1; then
    cat "$log" >&2
    echo "hf checks: FAILED: $name ($((SECONDS - start)) s); its files are in $scratch" >&2
    failed=1
  else
    grep "^check_" "$log" || true
    echo "hf checks: $name passed in $((SECONDS - start)) s"
    rm -rf "$scratch"
  fi
  rm -f "$log"
done
[ "$ran" -gt 0 ] || { echo "hf checks: FAILED: no check_*.py in $here" >&2; exit 1; }
exit $failed
