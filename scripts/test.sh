#!/usr/bin/env bash
# Set up, check the formatting (.clang-format), build and run every test:
# the release build (unit, plugin, CLI,
# install and layering tests), the gpu-labelled tests on the CPU emulation
# of CUDA (the `emulated` preset, where the CUDA toolkit's headers are
# installed: docs/gpu.md), the checks against the real tools
# (scripts/external_checks.sh: TensorBoard/wandb readers, DeepSpeed as the
# oracle, Hugging Face), then the ASan+UBSan build of the same tests but the
# CLI's (tests/CMakeLists.txt, DSCORE_CLI_TESTS), then
# the TSan build of the multi-threaded tests only (ctest label tsan: the comm
# stream, the engine, mpirun ranks with overlap_comm and the fault paths; see
# dscore_tsan_test in tests/CMakeLists.txt), then 30 seconds of libFuzzer on
# each reader of user files and the config loader (scripts/fuzz.sh, clang).
#
# The external checks (mostly pip installs and Python) run in the background
# while the ASan build compiles, with their output in
# build/external-checks.log, printed when they end; the ASan tests start only
# after they have ended, and their failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/check_format.sh
bash scripts/build.sh release
ctest --preset release
phase() { echo "test.sh: $1 at $((SECONDS / 60)) min $((SECONDS % 60)) s"; }
phase "release build and tests done"
cuda_include=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/../include
if [ -e "$cuda_include/cuda_runtime_api.h" ]; then
  bash scripts/build.sh emulated
  ctest --preset emulated
  phase "gpu tests on the CUDA emulation done"
else
  echo "test.sh: no CUDA toolkit headers ($cuda_include): the gpu tests on the CUDA emulation" \
       "do not run"
fi
if [ "${DSCORE_SKIP_SANITIZERS:-0}" = "1" ]; then
  bash scripts/external_checks.sh
  phase "external checks done"
  exit 0
fi

external_log=build/external-checks.log
mkdir -p build
# setsid: the checks get a process group of their own, ended with them if
# this script stops early (a failed ASan build).
setsid bash scripts/external_checks.sh > "$external_log" 2>&1 &
external_pid=$!
trap '[ -z "${external_pid:-}" ] || kill -- -"$external_pid" 2>/dev/null || true' EXIT
echo "test.sh: external checks started in the background (output: $external_log)"
bash scripts/build.sh asan
phase "ASan build done"
external_status=0
wait "$external_pid" || external_status=$?
external_pid=
echo "---- scripts/external_checks.sh (exit status $external_status) ----"
cat "$external_log"
echo "---- end of scripts/external_checks.sh ----"
if [ "$external_status" -ne 0 ]; then
  echo "test.sh: FAILED: the external checks (scripts/external_checks.sh) exited with" \
       "status $external_status; their output is above and in $external_log" >&2
  exit 1
fi
phase "external checks done"
ctest --preset asan
phase "ASan tests done"
cmake --preset tsan >/dev/null
cmake --build --preset tsan --target dscore_tsan_tests
ctest --preset tsan
phase "TSan done"
bash scripts/fuzz.sh 30
phase "fuzzing done"
