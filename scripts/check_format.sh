#!/usr/bin/env bash
# Check that every C/C++/CUDA source follows .clang-format (clang-format in
# check mode, no file changed). With --fix, format them in place instead.
# The frozen ABI copies under sdk/abi/ are byte-for-byte history and are
# left as released.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.cc' '*.h' '*.hpp' '*.cu' '*.cuh' | grep -v '^sdk/abi/')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2> /tmp/dscore_format.log; then
  grep -E '^[^ ].*(warning|error):' /tmp/dscore_format.log | cut -d: -f1 | sort -u | sed 's/^/  /' >&2
  echo "check_format: the files above differ from .clang-format; run: bash scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files follow .clang-format"
