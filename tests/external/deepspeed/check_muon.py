"""DeepSpeed as the oracle for Muon (issue 51): the mlp problem of
check_training.py trained with {"type": "Muon"} by DeepSpeed 0.19 and by
`dscore run` at ZeRO stages 0-3 on 1 and 2 ranks, fp32.

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

Usage: check_muon.py <dscore binary>   (DeepSpeed's python is this one)
"""
import copy
import json
import os
import sys
import tempfile
import time

import check_training as ct

LOSS_RTOL = {0: 2e-3, 1: 5e-5, 2: 5e-5, 3: 5e-5}
STAGES = (0, 1, 2, 3)
WORLDS = (1, 2)


def config_for(stage):
    c = copy.deepcopy(ct.REFERENCE)
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
        for s in STAGES:
            paths[s] = os.path.join(folder, f"muon_stage{s}.json")
            with open(paths[s], "w") as f:
                json.dump(config_for(s), f)
        started = time.time()
        jobs = {w: ct.start_deepspeed(w, [paths[s] for s in STAGES], folder) for w in WORLDS}
        mine = {(s, w): ct.run_dscore(dscore, ("fp32", s, False), w, paths[s], folder)[0]
                for w in WORLDS for s in STAGES}
        deepspeed = {}
        for w, job in jobs.items():
            result = ct.finish_deepspeed(job, lambda w=w: ct.start_deepspeed(w, [paths[s] for s in STAGES], folder),
                                         started + ct.DEEPSPEED_SECONDS, f"check_muon ({w}-rank runs)")
            with open(result) as f:
                deepspeed[w] = json.load(f)
        print(f"check_muon: DeepSpeed {deepspeed[1]['deepspeed']} and dscore, {len(STAGES) * len(WORLDS)} runs "
              f"in {time.time() - started:.0f} s")
        for w in WORLDS:
            for s in STAGES:
                ds = deepspeed[w]["runs"][paths[s]]
                losses = mine[(s, w)]
                name = f"Muon stage {s}, {w} rank{'s' if w > 1 else ''} ({ds['wrapper']}/{ds['optimizer']})"
                if ds["optimizer"] != "MuonWithAuxAdam" or len(losses) != len(ds["losses"]):
                    failures.append(f"{name}: DeepSpeed ran {ds['optimizer']} for {len(ds['losses'])} steps, "
                                    f"dscore logged {len(losses)}")
                    continue
                rel, worst = ct.worst_relative(ds["losses"], losses)
                print(f"check_muon: {name}: max rel {rel:.3g} (step {worst + 1}); losses "
                      f"{ds['losses'][0]:.6f} -> {ds['losses'][-1]:.6f}")
                if rel > LOSS_RTOL[s]:
                    failures.append(f"{name}: step {worst + 1} loss DeepSpeed {ds['losses'][worst]!r}, dscore "
                                    f"{losses[worst]!r}: relative difference {rel:.3g} > {LOSS_RTOL[s]}")
    for f in failures:
        print(f"check_muon: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
