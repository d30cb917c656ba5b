# Sourced by run-gpu-tests.sh and run-gpu-bench.sh of a GPU bundle
# (scripts/gpu-bundle.sh), with `here` set to the bundle: unpacks the
# binaries (tree.tar.xz) into the bundle's tree/ once, makes the build
# folder the binaries were built in (BUILD_DIR: they find plugins and
# helpers there) a link to the bundle's tree/ where it does not exist,
# unpacks the bundle's libraries (lib.tar.xz) into a temporary folder and
# sets LD_LIBRARY_PATH to it and to every site-packages nvidia/*/lib that
# python3 finds (PyTorch's CUDA runtime, cuBLAS and NCCL).
# unxz: xz where the machine has it, else Python's tarfile.
unxz_into() {  # unxz_into ARCHIVE FOLDER
  if command -v xz >/dev/null; then
    xz -dc "$1" | tar -C "$2" -xf -
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"
  fi
}
if [ ! -d "$here/tree" ]; then
  unxz_into "$here/tree.tar.xz" "$here" || { echo "cannot unpack $here/tree.tar.xz"; exit 1; }
fi
build=$(cat "$here/BUILD_DIR")
if [ ! -e "$build" ]; then
  mkdir -p "$(dirname "$build")" && ln -s "$here/tree" "$build" ||
    { echo "cannot link $build to $here/tree (run as a user who may create it)"; exit 1; }
  echo "linked $build -> $here/tree"
elif [ "$(readlink -f "$build")" != "$(readlink -f "$here/tree")" ]; then
  echo "note: $build exists; the binaries read plugins and helpers from it"
fi
bundle_libs=$(mktemp -d "${TMPDIR:-/tmp}/dscore-gpu-lib.XXXXXX")
trap 'rm -rf "$bundle_libs"' EXIT
unxz_into "$here/lib.tar.xz" "$bundle_libs"
libs=$bundle_libs/lib
if command -v python3 >/dev/null; then
  nvidia=$(python3 -c 'import nvidia, os, glob
print(":".join(sorted(d for p in nvidia.__path__ for d in glob.glob(os.path.join(p, "*", "lib")))))' \
    2>/dev/null || true)
  [ -n "$nvidia" ] && libs=$libs:$nvidia
fi
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
