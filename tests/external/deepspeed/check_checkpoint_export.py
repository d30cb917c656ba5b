"""dscore's checkpoints in DeepSpeed's format: `dscore run` trains the oracle
mlp (check_training.py's reference problem) for 20 steps and saves after
step 10; `dscore checkpoint export-deepspeed` writes that save as DeepSpeed's
ZeRO-1/2 files for a given world size; DeepSpeed 0.19.8 loads them
(engine.load_checkpoint) and trains steps 11-20. Its losses must match
dscore's own steps 11-20 within check_training.py's bounds (fp32 2e-6
relative, bf16 2e-2), and its lr must equal dscore's at every step.

Runs: fp32 at ZeRO 1 and 2 and bf16 at ZeRO 2 on 2 ranks, and fp32 at ZeRO 2
on 1 rank; each saved by dscore at the same world size and stage 3 (the
export re-partitions whatever saved it).

The universal format (--universal) at another world size: dscore saves at
step 10 on 2 ranks; DeepSpeed loads the export with "load_universal" on 1
rank (fp32, bf16) and on 2 (fp32), and its steps 11-20 must match dscore
resuming the same save at the same world size.

Usage: check_checkpoint_export.py <dscore binary>
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import check_training as ct

SAVE_AT = 10
RUNS = [("fp32", 1, 2), ("fp32", 2, 2), ("bf16", 2, 2), ("fp32", 2, 1)]
UNIVERSAL = [("fp32", 1), ("bf16", 1), ("fp32", 2)]  # (dtype, DeepSpeed's world size)


def dscore_losses(work):
    return (ct.read_csv(os.path.join(work, "out/csv/Train_Samples_train_loss.csv"), "train_loss"),
            ct.read_csv(os.path.join(work, "out/csv/Train_Samples_lr.csv"), "lr"))


def universal_run(dscore, folder, dtype, world):
    """dscore saves at step 10 on 2 ranks, exports it as universal, and
    resumes it at `world` ranks to step 20: (export folder, losses, lrs of
    steps 11-20)."""
    name = f"universal_{dtype}_w{world}"
    work = os.path.join(folder, "dscore_" + name)
    os.makedirs(work)
    config = ct.config_for(dtype, 3, False)
    config.update(checkpoint_dir="ck", save_interval=SAVE_AT, train_steps=SAVE_AT)
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(config, f)
    run([dscore, "run", "--config", "config.json", "-n", "2"], f"dscore run ({name})", cwd=work)
    exported = os.path.join(folder, "deepspeed_" + name)
    said = run([dscore, "checkpoint", "export-deepspeed", os.path.join(work, "ck"), exported, "--universal"],
               f"dscore checkpoint export-deepspeed --universal ({name})")
    print(f"check_checkpoint_export: {said.splitlines()[0]}")
    resumed = os.path.join(work, "resumed")
    os.makedirs(resumed)
    config = ct.config_for(dtype, 2, False)
    config["csv_monitor"] = {"enabled": True, "output_path": "out", "job_name": "csv"}
    with open(os.path.join(resumed, "config.json"), "w") as f:
        json.dump(config, f)
    run([dscore, "run", "--config", "config.json", "--resume", os.path.join(work, "ck"), "-n", str(world)],
        f"dscore run --resume ({name})", cwd=resumed)
    losses, lrs = dscore_losses(resumed)
    return name, exported, losses, lrs


def run(cmd, what, cwd=None):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=ct.DSCORE_RUN_SECONDS,
                         start_new_session=True)
    if out.returncode != 0:
        sys.exit(f"check_checkpoint_export: FAILED: {what}:\n{out.stdout}{out.stderr}")
    return out.stdout


def main():
    dscore = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        mine, configs = {}, {w: [] for w in (1, 2)}
        for dtype, stage, world in RUNS:
            name = f"{dtype}_s{stage}_w{world}"
            work = os.path.join(folder, "dscore_" + name)
            os.makedirs(work)
            config = ct.config_for(dtype, 3, False)  # saved at stage 3, exported for `stage`
            config["csv_monitor"] = {"enabled": True, "output_path": "out", "job_name": "csv"}
            config["checkpoint_dir"] = "ck"
            config["save_interval"] = SAVE_AT
            with open(os.path.join(work, "config.json"), "w") as f:
                json.dump(config, f)
            run([dscore, "run", "--config", "config.json", "-n", str(world)],
                f"dscore run ({name})", cwd=work)
            losses, lrs = dscore_losses(work)
            mine[name] = (losses[SAVE_AT:], lrs[SAVE_AT:])
            exported = os.path.join(folder, "deepspeed_" + name)
            said = run([dscore, "checkpoint", "export-deepspeed", os.path.join(work, "ck"), exported,
                        "--world-size", str(world), "--stage", str(stage), "--tag", f"global_step{SAVE_AT}"],
                       f"dscore checkpoint export-deepspeed ({name})")
            print(f"check_checkpoint_export: {said.splitlines()[0]}")
            ds_config = ct.config_for(dtype, stage, False)
            ds_config["load_checkpoint_dir"] = exported
            path = os.path.join(folder, name + ".json")
            with open(path, "w") as f:
                json.dump(ds_config, f)
            configs[world].append((name, path))
        for dtype, world in UNIVERSAL:
            name, exported, losses, lrs = universal_run(dscore, folder, dtype, world)
            mine[name] = (losses, lrs)
            ds_config = ct.config_for(dtype, 2, False)
            ds_config["load_checkpoint_dir"] = exported
            ds_config["checkpoint"] = {"load_universal": True}
            path = os.path.join(folder, name + ".json")
            with open(path, "w") as f:
                json.dump(ds_config, f)
            configs[world].append((name, path))
        started = time.time()
        jobs = {w: ct.start_deepspeed(w, [p for _, p in configs[w]], folder) for w in (1, 2)}
        deepspeed = {}
        for w, job in jobs.items():
            result = ct.finish_deepspeed(job, lambda w=w: ct.start_deepspeed(w, [p for _, p in configs[w]], folder),
                                         started + ct.DEEPSPEED_SECONDS, f"check_checkpoint_export ({w}-rank runs)")
            with open(result) as f:
                deepspeed[w] = json.load(f)
        print(f"check_checkpoint_export: DeepSpeed {deepspeed[2]['deepspeed']} loaded and trained "
              f"{len(RUNS) + len(UNIVERSAL)} exported checkpoints in {time.time() - started:.0f} s")
        for w in (1, 2):
            for name, path in configs[w]:
                ds = deepspeed[w]["runs"][path]
                got, lrs = mine[name]
                want = ds["losses"]
                dtype = "bf16" if "bf16" in name else "fp32"
                if len(want) != len(got):
                    failures.append(f"{name}: DeepSpeed trained {len(want)} steps after the load, dscore "
                                    f"{len(got)}")
                    continue
                rels = [abs(a - b) / abs(b) for a, b in zip(want, got)]
                worst = max(range(len(rels)), key=rels.__getitem__)
                lr_ok = ds["lrs_after"] == lrs
                print(f"check_checkpoint_export: {name}: DeepSpeed's steps {SAVE_AT + 1}-{SAVE_AT + len(got)} "
                      f"after loading, max rel {max(rels):.3g} (step {SAVE_AT + worst + 1}), lr "
                      f"{'equal at every step' if lr_ok else 'DIFFERENT'}")
                if max(rels) > ct.LOSS_RTOL[dtype]:
                    failures.append(f"{name}: step {SAVE_AT + worst + 1} loss DeepSpeed {want[worst]!r}, "
                                    f"dscore {got[worst]!r}: relative {rels[worst]:.3g} > {ct.LOSS_RTOL[dtype]}")
                if not lr_ok:
                    failures.append(f"{name}: lr DeepSpeed {ds['lrs_after']}, dscore {lrs}")
    for f in failures:
        print(f"check_checkpoint_export: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
