#!/usr/bin/env bash
# Runs every test executable of a GPU bundle (scripts/gpu-bundle.sh) and
# reports each as passed, failed or skipped. The libraries come from the
# bundle (lib.tar.xz, unpacked by bundle-env.sh) and from Python's
# site-packages nvidia/*/lib (PyTorch's CUDA runtime, NCCL and cuBLAS);
# nothing else is needed on the machine. The
# tests look for plugins and helper programs under the build folder they
# were built in (BUILD_DIR): where that path does not exist, it is made a
# link to this bundle's tree/.
#
#   bash run-gpu-tests.sh [gtest arguments...]
#
# DSCORE_GPU_TEST_TIMEOUT (seconds, default 600) ends an executable that runs
# longer, reported as failed: a hung test must not spend a lease.
# DSCORE_GPU_TEST_LOG (a file): every executable's whole output is appended
# there (only the last 40 lines of a failure are printed).
# DSCORE_GPU_TEST_DEADLINE (seconds since the epoch): no executable runs
# past it; those left when fewer than 15 s remain are reported NOT RUN.
#
# Exit status: 0 when no test failed or went unrun (all skipped counts as
# 0), else 1.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/bundle-env.sh"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

passed=0 failed=0 skipped=0 not_run=0
while read -r rel; do
  exe=$here/tree/$rel
  name=$(basename "$rel")
  seconds=${DSCORE_GPU_TEST_TIMEOUT:-600}
  if [ -n "${DSCORE_GPU_TEST_DEADLINE:-}" ]; then
    remaining=$((DSCORE_GPU_TEST_DEADLINE - $(date +%s)))
    if [ "$remaining" -lt 15 ]; then
      not_run=$((not_run + 1))
      echo "NOT RUN $name (the session's deadline)"
      continue
    fi
    [ "$remaining" -lt "$seconds" ] && seconds=$remaining
  fi
  log=$(mktemp)
  timeout -k 5 "$seconds" "$exe" "$@" >"$log" 2>&1
  rc=$?
  [ $rc -eq 124 ] && echo "    (timed out after $seconds s)" >>"$log"
  if [ -n "${DSCORE_GPU_TEST_LOG:-}" ]; then
    { echo "===== $name (exit $rc)"; cat "$log"; } >>"$DSCORE_GPU_TEST_LOG"
  fi
  ran=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  skips=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    echo "FAIL $name (exit $rc)"
    tail -40 "$log" | sed 's/^/    /'
  elif [ "${ran:-0}" = 0 ] && [ -n "$skips" ]; then
    skipped=$((skipped + 1))
    echo "SKIP $name ($skips skipped: $(grep -A1 -m1 ': Skipped$' "$log" | tail -1))"
  else
    passed=$((passed + 1))
    echo "PASS $name (${ran:-0} passed${skips:+, $skips skipped})"
  fi
  rm -f "$log"
done <"$here/gpu-tests.txt"

late=""
[ $not_run -gt 0 ] && late=", $not_run not run (deadline)"
echo "summary: $passed passed, $failed failed, $skipped skipped$late"
[ $failed -eq 0 ] && [ $not_run -eq 0 ]
