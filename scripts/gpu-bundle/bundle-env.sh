# Sourced by run-gpu-tests.sh and run-gpu-bench.sh of a GPU bundle
# (scripts/gpu-bundle.sh), with `here` set to the bundle: unpacks the
# bundle's libraries (lib.tar.xz) into a temporary folder and sets
# LD_LIBRARY_PATH to it and to every site-packages nvidia/*/lib that
# python3 finds (PyTorch's CUDA runtime, cuBLAS and NCCL).
bundle_libs=$(mktemp -d "${TMPDIR:-/tmp}/dscore-gpu-lib.XXXXXX")
trap 'rm -rf "$bundle_libs"' EXIT
if command -v xz >/dev/null; then
  xz -dc "$here/lib.tar.xz" | tar -C "$bundle_libs" -xf -
else
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$here/lib.tar.xz" "$bundle_libs"
fi
libs=$bundle_libs/lib
if command -v python3 >/dev/null; then
  nvidia=$(python3 -c 'import nvidia, os, glob
print(":".join(sorted(d for p in nvidia.__path__ for d in glob.glob(os.path.join(p, "*", "lib")))))' \
    2>/dev/null || true)
  [ -n "$nvidia" ] && libs=$libs:$nvidia
fi
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
