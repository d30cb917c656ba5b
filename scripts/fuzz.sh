#!/usr/bin/env bash
# Coverage-guided fuzzing of the readers of user files and of the config
# loader (tests/fuzz/): builds the libFuzzer targets with clang in
# build/fuzz (every library instrumented, ASan on) and runs each for
# SECONDS (default 30) over a copy of its seed corpus, two at a time. A
# finding (a crash, a leak, or a target's own check) fails the script with
# the fuzzer's report and the input that caused it.
# usage: bash scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
cxx=$(command -v clang++-14 || command -v clang++)
cc=$(command -v clang-14 || command -v clang)
cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSCORE_FUZZ=ON \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DDSCORE_WITH_CUDA=OFF \
  -DDSCORE_WITH_NCCL=OFF -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" > build/fuzz-configure.log
# target:seed folder
targets="reader_fuzzer_safetensors_header:tests/fuzz/readers/safetensors
reader_fuzzer_llmc_shard:tests/fuzz/readers/llmc
reader_fuzzer_hf_folder:tests/fuzz/readers/hf_folder
reader_fuzzer_tokenizer_json:tests/fuzz/readers/tokenizer
reader_fuzzer_torch_file:tests/fuzz/readers/torch
config_fuzzer:tests/fuzz/corpus"
cmake --build build/fuzz -j2 --target $(echo "$targets" | cut -d: -f1 | tr '\n' ' ')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fuzz() {  # target seeds
  mkdir -p "$work/$1" "$work/$1.crash"
  cp "$2"/* "$work/$1/"
  if ! (cd "$work/$1.crash" && "$OLDPWD/build/fuzz/bin/$1" "$work/$1" -max_total_time="$seconds" \
        -rss_limit_mb=2048 > "$work/$1.log" 2>&1); then
    echo "fuzz.sh: $1 found a problem:" >&2
    tail -n 60 "$work/$1.log" >&2
    for f in "$work/$1.crash"/*; do [ -e "$f" ] && echo "input $f:" >&2 && od -c "$f" | head -20 >&2; done
    return 1
  fi
  echo "fuzz.sh: $1: $(grep -E '^#[0-9]+.*DONE' "$work/$1.log" | tail -n 1)"
}
status=0
pids=()
while IFS=: read -r target seeds; do
  fuzz "$target" "$seeds" &
  pids+=($!)
  if [ ${#pids[@]} -eq 2 ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[1]}")
  fi
done <<< "$targets"
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
