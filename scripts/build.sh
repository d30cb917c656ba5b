#!/usr/bin/env bash
# Configure and build one CMake preset (default: release) with 2 jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
