"""dscore's fp16 loss scale against DeepSpeed's own scaler, exactly.

For each fp16 section below and each overflow pattern, DeepSpeed's scaler
is built the way its ZeRO optimizers build it (DeepSpeedFP16Config from the
section, then CreateLossScaler(torch.half, loss_scale, loss_scale == 0,
dynamic_loss_scale_args())) and driven with update_scale(overflow); dscore's
is the engine's (LossScaler::from_config), driven by `dscore loss-scale`.
The scale after every iteration, and the
iteration where an overflow at the minimum scale raises, must be equal.

Usage: check_loss_scaler.py <dscore binary>
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import types

import torch
import deepspeed
from deepspeed.runtime.fp16 import loss_scaler
from deepspeed.runtime.fp16.loss_scaler import CreateLossScaler
from deepspeed.runtime.precision_config import DeepSpeedFP16Config

SECTIONS = {
    "defaults": {"enabled": True},
    "window3_hyst2": {"enabled": True, "initial_scale_power": 4, "loss_scale_window": 3, "hysteresis": 2},
    "window5_hyst3_consecutive": {"enabled": True, "initial_scale_power": 8, "loss_scale_window": 5,
                                  "hysteresis": 3, "consecutive_hysteresis": True},
    "window1_hyst1_min4": {"enabled": True, "initial_scale_power": 5, "loss_scale_window": 1, "hysteresis": 1,
                           "min_loss_scale": 4},
    "window2_hyst4": {"enabled": True, "initial_scale_power": 12, "loss_scale_window": 2, "hysteresis": 4},
    "static": {"enabled": True, "loss_scale": 128},
}


def patterns():
    rng = random.Random(20261124)
    out = {
        "clean_2100": "0" * 2100,  # two doublings at the default window of 1000
        "first_overflows": "1" * 3 + "0" * 30,
        "alternating": "10" * 40,
        "pairs": "1100" * 20,
        "to_the_minimum": "1" * 60,  # reaches min_loss_scale, then the error
    }
    for p in (0.05, 0.2, 0.5):
        out[f"random_{p}"] = "".join("1" if rng.random() < p else "0" for _ in range(400))
    return out


def deepspeed_trace(section, pattern):
    cfg = DeepSpeedFP16Config(**section)
    scaler = CreateLossScaler(dtype=torch.half, static_loss_scale=cfg.loss_scale,
                              dynamic_scaling=cfg.loss_scale == 0,
                              dynamic_loss_args=cfg.dynamic_loss_scale_args())
    lines = [f"initial {float(scaler.cur_scale)!r}"]
    for i, c in enumerate(pattern):
        try:
            scaler.update_scale(c == "1")
        except Exception as e:  # DeepSpeed raises a bare Exception at the minimum
            if "minimum" not in str(e):
                raise
            lines.append(f"error {i}")
            break
        lines.append(f"{i} {c} {float(scaler.cur_scale)!r}")
    return lines


def dscore_trace(dscore, section, pattern, folder):
    """`dscore loss-scale`'s CSV trace in deepspeed_trace's line format."""
    path = os.path.join(folder, "fp16.json")
    with open(path, "w") as f:
        json.dump({"train_batch_size": 1, "fp16": section}, f)
    overflows = pattern.replace("1", "O").replace("0", "C")
    out = subprocess.run([dscore, "loss-scale", "--config", path, "--overflows", overflows],
                         capture_output=True, text=True)
    rows = [r.split(",") for r in out.stdout.split("\n")[1:] if r]
    if not rows or (out.returncode != 0 and "minimum" not in out.stderr):
        sys.exit(f"check_loss_scaler: FAILED: dscore loss-scale --config {path} ...: {out.stderr.strip()}")
    lines = [f"initial {rows[0][2]}"]
    lines += [f"{int(r[0]) - 1} {r[1]} {r[2]}" for r in rows[1:]]
    if out.returncode != 0:  # an overflow at the minimum scale: the update after the last row
        lines.append(f"error {len(rows) - 1}")
    return lines


def main():
    dscore = sys.argv[1]
    # update_scale asks deepspeed.comm for the rank only to decide who logs;
    # answering 0 spares a process group (and DeepSpeed's JIT-built shm op).
    loss_scaler.dist = types.SimpleNamespace(get_rank=lambda: 0)
    failures, compared = [], 0
    with tempfile.TemporaryDirectory() as folder:
        for name, section in SECTIONS.items():
            for pname, pattern in patterns().items():
                ds, mine = deepspeed_trace(section, pattern), dscore_trace(dscore, section, pattern, folder)
                compared += 1
                if ds != mine:
                    at = next((k for k, (a, b) in enumerate(zip(ds, mine)) if a != b), min(len(ds), len(mine)))
                    failures.append(f"fp16 {name} ({json.dumps(section)}), pattern {pname}: first difference at "
                                    f"line {at}: DeepSpeed {ds[at] if at < len(ds) else '<end>'!r}, "
                                    f"dscore {mine[at] if at < len(mine) else '<end>'!r}")
    print(f"check_loss_scaler: {compared - len(failures)}/{compared} traces equal to DeepSpeed "
          f"{deepspeed.__version__}'s scaler ({len(SECTIONS)} fp16 sections x {len(patterns())} patterns)")
    for f in failures:
        print(f"check_loss_scaler: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
