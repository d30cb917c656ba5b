#!/usr/bin/env bash
# Set up, build and run every test: the release build (unit, plugin, CLI,
# install and layering tests), then the ASan+UBSan build of the same tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
ctest --preset release
if [ "${DSCORE_SKIP_SANITIZERS:-0}" != "1" ]; then
  bash scripts/build.sh asan
  ctest --preset asan
fi
