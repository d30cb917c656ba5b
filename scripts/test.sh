#!/usr/bin/env bash
# Set up, check the formatting (.clang-format), build and run every test:
# the release build (unit, plugin, CLI,
# install and layering tests), the monitor files checked with TensorBoard's
# and wandb's own readers (tests/external), then the ASan+UBSan build of the
# same tests, then the TSan build of the multi-threaded tests only (ctest
# label tsan: the comm stream, the engine, mpirun ranks with overlap_comm and
# the fault paths; see dscore_tsan_test in tests/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/check_format.sh
bash scripts/build.sh release
ctest --preset release
# The monitors' files loaded by the real tools (TensorBoard's EventAccumulator,
# wandb's run-file reader and `wandb sync`), then DeepSpeed as the oracle:
# needs python3 with venv (setup.sh installs it) and PyPI the first time; a
# failed install fails the run.
if [ "${DSCORE_SKIP_EXTERNAL:-0}" = "1" ]; then
  echo "test.sh: DSCORE_SKIP_EXTERNAL=1: tests/external (TensorBoard/wandb readers) NOT run" >&2
elif python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  bash tests/external/run_checks.sh build/release/bin/dscore
  # DeepSpeed itself as the oracle (losses at ZeRO 0-3 on 1 and 2 ranks, the
  # loss scaler, the LR schedules): torch + deepspeed from PyPI, CPU only.
  if [ "${DSCORE_SKIP_DEEPSPEED:-0}" = "1" ]; then
    echo "test.sh: DSCORE_SKIP_DEEPSPEED=1: tests/external/deepspeed NOT run" >&2
  else
    bash tests/external/deepspeed/run_checks.sh build/release/bin/dscore
    # Hugging Face's libraries (same venv): from_pretrained, export-hf and
    # the tokenizers against transformers, tokenizers and sentencepiece.
    bash tests/external/hf/run_checks.sh build/release/bin/dscore
  fi
else
  echo "test.sh: WARNING: python3 with venv not found: tests/external NOT run" \
       "(apt-get install python3-venv python3-pip, as scripts/setup.sh does)" >&2
fi
if [ "${DSCORE_SKIP_SANITIZERS:-0}" != "1" ]; then
  bash scripts/build.sh asan
  ctest --preset asan
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan --target dscore_tsan_tests
  ctest --preset tsan
fi
