#!/usr/bin/env bash
# Set up, build, and train the bundled quickstart config.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
./build/release/bin/dscore run --config configs/quickstart.json "$@"
