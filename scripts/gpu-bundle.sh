#!/usr/bin/env bash
# Build the GPU runtime here (CMake preset `gpu`: Release, sm_90, CUDA
# required) and pack into one folder what a lent GPU machine needs to run
# the gpu-labelled tests: the dscore binary, every plugin and the models'
# CUDA modules, the test executables and the programs they start
# (build/gpu/gpu-tests.txt, written by tests/CMakeLists.txt; the
# plugins' CUDA load tests too), and the shared libraries that machine lacks
# (Boost, TBB, OpenMPI, pcre2, sentencepiece, OpenBLAS, ...). It leaves out
# what the GPU machine brings: the C and C++ runtimes, and CUDA, NCCL and
# cuBLAS (the driver, or PyTorch's site-packages nvidia/*/lib). See
# docs/gpu.md, "Running on a lent GPU machine".
#
#   scripts/gpu-bundle.sh [OUT]     # OUT defaults to build/gpu-bundle
#
# Environment: DSCORE_GPU_PRESET (default gpu), DSCORE_JOBS (default 2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
preset=${DSCORE_GPU_PRESET:-gpu}
build=$root/build/$preset
out=${1:-$root/build/gpu-bundle}
jobs=${DSCORE_JOBS:-2}

# -Werror as the release preset has it: the same compiler flags, so ccache
# serves every object the release build already compiled.
nice -n 10 cmake --preset "$preset" -DDSCORE_WERROR=ON >/dev/null
nice -n 10 cmake --build "$build" -j"$jobs" --target dscore dscore_plugins dscore_gpu_tests \
  gpu_matmul_rate gpt_gpu fused_adam

rm -rf "$out"
mkdir -p "$out/lib" "$out/tree"

# tree/ holds the build's files at their paths under the build folder: the
# tests find plugins, dscore and their helpers by the absolute build paths
# compiled into them, which run-gpu-tests.sh maps onto tree/.
copy_built() {
  local rel=${1#"$build"/}
  mkdir -p "$out/tree/$(dirname "$rel")"
  cp "$1" "$out/tree/$rel"
  strip --strip-unneeded "$out/tree/$rel"
}
copy_built "$build/bin/dscore"
# The plugins, and the gpt and llama plugins' CUDA modules in the plugin
# folder's cuda/ (the plugins load them for "device": "cuda"; docs/gpu.md).
for so in "$build"/lib*/dscore/plugins/*.so "$build"/lib*/dscore/plugins/cuda/*.so; do
  copy_built "$so"
done
for module in libdscore_gpt_cuda.so libdscore_llama_cuda.so; do
  compgen -G "$out/tree/lib*/dscore/plugins/cuda/$module" >/dev/null ||
    { echo "gpu-bundle: the CUDA module $module was not built into $build" >&2; exit 1; }
done
: >"$out/gpu-tests.txt"
while read -r kind path; do
  copy_built "$path"
  [ "$kind" = test ] && echo "${path#"$build"/}" >>"$out/gpu-tests.txt"
done <"$build/gpu-tests.txt"
echo "$build" >"$out/BUILD_DIR"
# The GPU benches, run by run-gpu-bench.sh: bench/gpu_matmul_rate (the
# cuBLAS GEMM ceiling), bench/gpu/gpt_gpu (GPT-2 124M MFU, ZeRO-Offload),
# bench/gpu/fused_adam (FusedAdam vs the device copy bandwidth).
for bench in gpu_matmul_rate gpt_gpu fused_adam; do
  copy_built "$build/bin/$bench"
done

# Shared libraries: everything the packed files load, less what the GPU
# machine provides itself.
provided='^(linux-vdso|ld-linux|libc|libm|libmvec|libdl|librt|libpthread|libresolv|libutil|libgcc_s|libstdc\+\+|libcuda|libcudart|libnccl|libcublas|libcublasLt|libnvrtc|libnvJitLink|libnvidia-.*|libcudnn.*|libcufft|libcurand|libcusparse|libcusolver)\.so'
# OpenBLAS is dlopen()ed by the CPU kernels (its core chosen first,
# plugins/models/transformer_common/cpu/blas_library.h), so no ldd lists it:
# copied by its soname, and its own libraries with the rest.
openblas=$(ldconfig -p | awk '/libopenblas\.so\.0 / {print $NF; exit}')
cp -L "$openblas" "$out/lib/libopenblas.so.0"
{
  find "$out/tree" -type f \( -name '*.so' -o -perm -u+x \) -print0
  printf '%s\0' "$openblas"
} | xargs -0 ldd 2>/dev/null | awk '/=> \// {print $1, $3}' | sort -u |
  while read -r name path; do
    if [[ $name =~ $provided ]]; then continue; fi
    if [ ! -e "$out/lib/$name" ]; then
      cp -L "$path" "$out/lib/$name"
      strip --strip-unneeded "$out/lib/$name" 2>/dev/null || true
    fi
  done

# Packed with xz (OpenBLAS alone is 35 MB, the binaries 51 MB on
# 2026-11-28): the run scripts unpack the libraries into a temporary folder
# and the binaries into the bundle's tree/ (bundle-env.sh), so the bundle
# stays far under the 64 MiB a device run carries with the repository.
tar -C "$out" -cf - lib | xz -T2 -6 >"$out/lib.tar.xz"
rm -rf "$out/lib"
tar -C "$out" -cf - tree | xz -T2 -6 >"$out/tree.tar.xz"
rm -rf "$out/tree"

cp "$root"/scripts/gpu-bundle/{run-gpu-tests.sh,run-gpu-bench.sh,run-gpu-session.sh,run-gpu-profile.sh,kernel_times.py,bundle-env.sh} "$out/"
chmod +x "$out"/run-gpu-*.sh

echo "bundle: $out"
echo "tests:  $(wc -l <"$out/gpu-tests.txt") executables; libraries: $(tar -tJf "$out/lib.tar.xz" | grep -c '\.so')"
du -sh "$out" | awk '{print "size:   " $1}'
