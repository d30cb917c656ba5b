"""Loads a dscore checkpoint and its `dscore zero-to-fp32` output with the
`safetensors` package: every file opens, the consolidated tensors have the
saved shapes, and each equals the fp32 master fragments of the per-rank
optimizer shards put back together here, independently of dscore's code
(the fragment list is in each file's "dscore" metadata).

Usage: check_safetensors.py <checkpoint dir> <zero-to-fp32 output dir>
"""
import glob
import json
import os
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file


def fail(message):
    print(f"check_safetensors: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    ck, out = sys.argv[1], sys.argv[2]
    tag = open(os.path.join(ck, "latest")).read().strip()
    folder = os.path.join(ck, tag)
    fragments = {}  # param -> [(begin, values)]
    shapes = None
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        # (numpy has no bfloat16: the bf16 model weights are listed, not loaded)
        with safe_open(path, "np") as f:
            meta = json.loads(f.metadata()["dscore"])
            keys = set(f.keys())
            for frag in meta["fragments"]:
                if frag["tensor"] not in keys:
                    fail(f"{path}: fragment tensor {frag['tensor']} is not in the file")
                if frag["slot"] == "fp32":
                    fragments.setdefault(frag["param"], []).append((frag["begin"], f.get_tensor(frag["tensor"])))
        if "state" in meta:
            shapes = {p["name"]: tuple(p["shape"]) for p in meta["state"]["params"]}
    if shapes is None:
        fail(f"no model-states file with the training state in {folder}")
    consolidated = {}
    for path in sorted(glob.glob(os.path.join(out, "*.safetensors"))):
        consolidated.update(load_file(path))
    if set(consolidated) != set(shapes):
        fail(f"consolidated names {sorted(consolidated)} != saved {sorted(shapes)}")
    for name, shape in shapes.items():
        parts = sorted(fragments.get(name, []), key=lambda p: p[0])
        whole = np.concatenate([values for _, values in parts]) if parts else np.zeros(0, np.float32)
        got = consolidated[name]
        if got.dtype != np.float32 or tuple(got.shape) != shape:
            fail(f"{name}: {got.dtype} {got.shape}, expected float32 {shape}")
        if whole.size != got.size or not np.array_equal(whole.reshape(shape), got):
            fail(f"{name}: the consolidated tensor differs from the saved fp32 fragments")
    print(f"check_safetensors: ok: {len(shapes)} tensors of {tag} match across "
          f"{len(glob.glob(os.path.join(folder, '*.safetensors')))} checkpoint files")


if __name__ == "__main__":
    main()
