"""`dscore lr-schedule --csv` against DeepSpeed's scheduler classes.

Each scheduler below is built as DeepSpeed's engine builds it
(deepspeed.runtime.lr_schedules.<type>(optimizer, **params)) over a torch
Adam whose lr is the config's optimizer lr; the lr (and, where the
scheduler sets them, the betas) in the optimizer's param group is read
before every scheduler.step(), which is what each update applies. dscore
prints the same per update with `dscore lr-schedule --config F --steps N
--csv` (full precision: Python's repr of the double). Both evaluate the
same formulas in double with the same libm, so the check is exact
equality; it reports the largest absolute and relative difference anyway.

Usage: check_lr_schedules.py <dscore binary>
"""
import csv
import io
import json
import os
import subprocess
import sys
import tempfile

import torch
import deepspeed
from deepspeed.runtime import lr_schedules

STEPS = 3000
LR = 0.001

SCHEDULES = [
    ("WarmupLR", {"warmup_min_lr": 0.0, "warmup_max_lr": 0.001, "warmup_num_steps": 10, "warmup_type": "log"}),
    ("WarmupLR", {"warmup_min_lr": 1e-5, "warmup_max_lr": 0.003, "warmup_num_steps": 1000, "warmup_type": "linear"}),
    ("WarmupLR", {"warmup_num_steps": 700}),
    ("WarmupDecayLR", {"total_num_steps": 2500, "warmup_min_lr": 0.0, "warmup_max_lr": 0.002,
                       "warmup_num_steps": 300, "warmup_type": "log"}),
    ("WarmupDecayLR", {"total_num_steps": 3000, "warmup_min_lr": 1e-4, "warmup_max_lr": 0.001,
                       "warmup_num_steps": 1, "warmup_type": "linear"}),
    ("WarmupCosineLR", {"total_num_steps": 2000, "warmup_min_ratio": 0.0, "warmup_num_steps": 100,
                        "cos_min_ratio": 0.0001, "warmup_type": "log"}),
    ("WarmupCosineLR", {"total_num_steps": 3000, "warmup_min_ratio": 0.1, "warmup_num_steps": 500,
                        "cos_min_ratio": 0.05, "warmup_type": "linear"}),
    ("OneCycle", {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 500,
                  "decay_lr_rate": 0.001, "decay_step_size": 100, "cycle_momentum": True,
                  "cycle_min_mom": 0.85, "cycle_max_mom": 0.95}),
    ("OneCycle", {"cycle_min_lr": 1e-5, "cycle_max_lr": 3e-3, "cycle_first_step_size": 400,
                  "cycle_second_step_size": 800, "cycle_first_stair_count": 4, "cycle_second_stair_count": 8,
                  "decay_lr_rate": 0.01, "decay_step_size": 50, "cycle_momentum": False}),
    ("OneCycle", {"cycle_min_lr": 2e-4, "cycle_max_lr": 2e-3, "cycle_first_step_size": 1000,
                  "decay_step_size": 0, "cycle_momentum": True, "cycle_min_mom": 0.8, "cycle_max_mom": 0.9,
                  "decay_mom_rate": 0.0}),
    ("LRRangeTest", {"lr_range_test_min_lr": 1e-5, "lr_range_test_step_size": 200,
                     "lr_range_test_step_rate": 1.5, "lr_range_test_staircase": False}),
    ("LRRangeTest", {"lr_range_test_min_lr": 1e-4, "lr_range_test_step_size": 333,
                     "lr_range_test_step_rate": 2.0, "lr_range_test_staircase": True}),
]


def deepspeed_rows(kind, params):
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=LR)
    scheduler = getattr(lr_schedules, kind)(optimizer, **params)
    rows = []
    for _ in range(STEPS):
        group = optimizer.param_groups[0]
        rows.append((group["lr"], group["betas"][0], group["betas"][1]))
        scheduler.step()
    return rows


def dscore_rows(dscore, kind, params, folder):
    path = os.path.join(folder, "schedule.json")
    with open(path, "w") as f:
        json.dump({"train_batch_size": 1, "optimizer": {"type": "Adam", "params": {"lr": LR}},
                   "scheduler": {"type": kind, "params": params}}, f)
    out = subprocess.run([dscore, "lr-schedule", "--config", path, "--steps", str(STEPS), "--csv"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"check_lr_schedules: FAILED: dscore lr-schedule for {kind} {params}: {out.stderr.strip()}")
    return list(csv.DictReader(io.StringIO(out.stdout)))


def main():
    dscore = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        for kind, params in SCHEDULES:
            ds, mine = deepspeed_rows(kind, params), dscore_rows(dscore, kind, params, folder)
            if len(mine) != STEPS:
                failures.append(f"{kind} {params}: dscore printed {len(mine)} rows, expected {STEPS}")
                continue
            max_abs = max_rel = 0.0
            unequal, first = 0, None
            for step, ((lr, b1, b2), row) in enumerate(zip(ds, mine), start=1):
                pairs = [("lr", lr, float(row["lr"]))]
                if row.get("beta1"):  # dscore prints the betas only when the scheduler sets them
                    pairs += [("beta1", b1, float(row["beta1"])), ("beta2", b2, float(row["beta2"]))]
                for what, want, got in pairs:
                    diff = abs(want - got)
                    max_abs = max(max_abs, diff)
                    max_rel = max(max_rel, diff / abs(want) if want else (0.0 if diff == 0 else float("inf")))
                    if want != got:
                        unequal += 1
                        first = first or f"update {step} {what}: DeepSpeed {want!r}, dscore {got!r}"
            momentum = " (+ betas)" if mine[0].get("beta1") else ""
            print(f"check_lr_schedules: {kind} {json.dumps(params)}: {STEPS} updates{momentum}, "
                  f"max abs diff {max_abs:.3g}, max rel diff {max_rel:.3g}, {unequal} unequal values")
            if unequal:
                failures.append(f"{kind} {json.dumps(params)}: {unequal} values differ; first: {first}")
    for f in failures:
        print(f"check_lr_schedules: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"check_lr_schedules: {len(SCHEDULES)} schedules equal to DeepSpeed {deepspeed.__version__}'s "
          f"over {STEPS} updates")


if __name__ == "__main__":
    main()
