#!/usr/bin/env bash
# Set up, build, and train the bundled quickstart: a small GPT on the
# shipped corpus (configs/data/quickstart.txt), 2 ranks with ZeRO-2, then
# sample a continuation from the checkpoint it saved.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
./build/release/bin/dscore run -n 2 --config configs/quickstart.json "$@"
./build/release/bin/dscore generate --checkpoint runs/quickstart/checkpoints --prompt "the old bear" \
  --max-new-tokens 200 --temperature 0.8 --top-k 20
