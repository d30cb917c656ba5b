"""DeepSpeed as the oracle for Muon (issue 51): the mlp problem of
check_training.py trained with {"type": "Muon"} by DeepSpeed 0.19 and by
`dscore run` at ZeRO stages 0-3 on 1 and 2 ranks, fp32 and bf16.

The config: muon_lr 0.02, adam_lr 1e-3, weight_decay 0.01, gradient_clipping
1.0, no scheduler, 12 steps. The mlp's four weight matrices take Muon (64x16,
64x64, 64x64, 4x64: both orientations, the Gram iteration on the wide ones),
its biases Adam. Clipping is where the stages differ: DeepSpeed
orthogonalizes before the norm at ZeRO 1-3 (the norm of the update, about
8 per 64x64 matrix, so clipping acts at every step) and after clipping the
raw gradients at stage 0, and dscore does the same (core/engine/preconditioner.h).
Stage 3 needs "reduce_scatter": false in DeepSpeed; dscore accepts it.

Bounds, per step's loss: a relative 5e-5 at stages 1-3, 2e-3 at stage 0.
The Newton-Schulz iteration runs in fp16 (ns_method "gram"). DeepSpeed
compiles it (torch.compile): fp16 GEMMs with fp32 sums, addmm for
`s * Y + A @ B`, one rounding per stored tensor, in-place scalars taken in
fp16; dscore's newton_schulz.cc does the same operations with the same
roundings, bitwise equal to DeepSpeed's muon_update on small matrices
(tests/plugins/optimizers/muon). On these 64-wide ones the two GEMMs' (and
norms') summation orders put a rare sum on the other side of an fp16
rounding boundary (2^-11 of an element of the update). Measured at stages
1-3: 8e-6 to 1.5e-5 (DeepSpeed's own stage 3 and stage 1 runs of this
problem differ by 4e-6), so 5e-5 leaves a 3x margin. At stage 0 the update
is not clipped (clipping acts on the raw gradients there), each step moves
the weights ~16x further and the loss falls twice as far, so a flipped
rounding moves the loss further too: measured 2.5e-4 to 4.1e-4 by steps
10-12; 2e-3 leaves a 5x margin. Mutations: leaving out Nesterov moves the
losses by 3.7e-4 to 6.3e-4 at stages 1-3 and 7.6e-3 at stage 0; leaving out
the sqrt(rows / cols) scale of the tall 64x16 matrix by 1e-2 to 7e-2.

bf16: check_training.py's bound, 2e-2 (bf16 weights keep 8 significant bits;
which weights move to the next bf16 value turns on the last bits of the
update). Measured: 5.8e-4 to 8.0e-4 at stages 1-3 and 5.5e-3 to 5.9e-3 at stage 0 (DeepSpeed's
FP16_UnfusedOptimizer path for bf16 there).

Usage: check_muon.py <dscore binary>   (DeepSpeed's python is this one)
"""
import copy
import json
import os
import sys
import tempfile
import time

import check_training as ct

LOSS_RTOL = {("fp32", 0): 2e-3, ("bf16", 0): 2e-2}
LOSS_RTOL.update({(dtype, s): bound for s in (1, 2, 3) for dtype, bound in (("fp32", 5e-5), ("bf16", 2e-2))})
DTYPES = ("fp32", "bf16")
STAGES = (0, 1, 2, 3)
WORLDS = (1, 2)


def config_for(dtype, stage):
    c = copy.deepcopy(ct.REFERENCE)
    if dtype == "bf16":
        c["bf16"] = {"enabled": True}
    del c["scheduler"]
    c["optimizer"] = {"type": "Muon", "params": {"muon_lr": 0.02, "adam_lr": 0.001, "weight_decay": 0.01}}
    c["train_steps"] = 12
    c["zero_optimization"] = {"stage": stage}
    if stage == 3:
        c["zero_optimization"].update({"stage3_param_persistence_threshold": 0, "reduce_scatter": False})
    return c


def main():
    dscore = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for dtype in DTYPES:
            for s in STAGES:
                paths[(dtype, s)] = os.path.join(folder, f"muon_{dtype}_stage{s}.json")
                with open(paths[(dtype, s)], "w") as f:
                    json.dump(config_for(dtype, s), f)
        runs = list(paths)
        started = time.time()
        jobs = {w: ct.start_deepspeed(w, [paths[r] for r in runs], folder) for w in WORLDS}
        mine = {(r, w): ct.run_dscore(dscore, (r[0], r[1], False), w, paths[r], folder)[0]
                for w in WORLDS for r in runs}
        deepspeed = {}
        for w, job in jobs.items():
            result = ct.finish_deepspeed(job, lambda w=w: ct.start_deepspeed(w, [paths[r] for r in runs], folder),
                                         started + ct.DEEPSPEED_SECONDS, f"check_muon ({w}-rank runs)")
            with open(result) as f:
                deepspeed[w] = json.load(f)
        print(f"check_muon: DeepSpeed {deepspeed[1]['deepspeed']} and dscore, {len(runs) * len(WORLDS)} runs "
              f"in {time.time() - started:.0f} s")
        for w in WORLDS:
            for dtype, s in runs:
                ds = deepspeed[w]["runs"][paths[(dtype, s)]]
                losses = mine[((dtype, s), w)]
                name = (f"Muon {dtype} stage {s}, {w} rank{'s' if w > 1 else ''} "
                        f"({ds['wrapper']}/{ds['optimizer']})")
                if ds["optimizer"] != "MuonWithAuxAdam" or len(losses) != len(ds["losses"]):
                    failures.append(f"{name}: DeepSpeed ran {ds['optimizer']} for {len(ds['losses'])} steps, "
                                    f"dscore logged {len(losses)}")
                    continue
                rel, worst = ct.worst_relative(ds["losses"], losses)
                print(f"check_muon: {name}: max rel {rel:.3g} (step {worst + 1}); losses "
                      f"{ds['losses'][0]:.6f} -> {ds['losses'][-1]:.6f}")
                if rel > LOSS_RTOL[(dtype, s)]:
                    failures.append(f"{name}: step {worst + 1} loss DeepSpeed {ds['losses'][worst]!r}, dscore "
                                    f"{losses[worst]!r}: relative difference {rel:.3g} > {LOSS_RTOL[(dtype, s)]}")
    for f in failures:
        print(f"check_muon: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
