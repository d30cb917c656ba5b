# Sourced by tests/external/deepspeed/run_checks.sh and bench/peer/run.sh:
# the venv with torch + DeepSpeed (pinned in requirements.txt beside this
# file, ~5 GB with what they pull), kept in build/deepspeed-venv and reused
# while requirements.txt is unchanged; DSCORE_ORACLE_VENV=<venv> uses an
# existing one instead (nothing is installed into it). Then the environment
# of a CPU-only run: DeepSpeed's CPU accelerator, its JIT-built CPU ops kept
# in build/deepspeed-torch-extensions, no CUDA looked for, Python's warnings
# out of the logs.
#
# deepspeed_venv <label>: sets `venv`; on failure prints "<label>: FAILED: ..."
# and exits 1.
deepspeed_venv() {
  local label="$1" dir root requirements want start
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  root="$(cd "$dir/../../.." && pwd)"
  requirements="$dir/requirements.txt"
  if [ -n "${DSCORE_ORACLE_VENV:-}" ]; then
    venv="$DSCORE_ORACLE_VENV"
    "$venv/bin/python" -c 'import deepspeed, torch' >/dev/null 2>&1 ||
      { echo "$label: FAILED: DSCORE_ORACLE_VENV=$venv has no deepspeed/torch" >&2; exit 1; }
  else
    venv="$root/build/deepspeed-venv"
    want="$(sha256sum "$requirements" | cut -d' ' -f1)"
    if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
      echo "$label: installing tests/external/deepspeed/requirements.txt into $venv"
      start=$SECONDS
      rm -rf "$venv"
      python3 -m venv "$venv"
      if ! "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"; then
        rm -rf "$venv"
        echo "$label: FAILED: pip could not install tests/external/deepspeed/requirements.txt" \
             "(no network or no PyPI access?); or point DSCORE_ORACLE_VENV at a venv with" \
             "deepspeed and torch" >&2
        exit 1
      fi
      echo "$want" > "$venv/.requirements.sha256"
      echo "$label: installed in $((SECONDS - start)) s"
    fi
  fi
  export DS_ACCELERATOR=cpu
  export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$root/build/deepspeed-torch-extensions}"
  export CUDA_VISIBLE_DEVICES="" PYTHONWARNINGS=ignore
}
