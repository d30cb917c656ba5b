"""DeepSpeed's own checkpoints, imported: DeepSpeed trains the oracle mlp
(check_training.py's reference problem) on 2 ranks, saves with
engine.save_checkpoint after step 10 and trains on to step 20. dscore
imports that folder (`dscore checkpoint import`, no torch involved) and
resumes from it (`dscore run --resume`) at 1 and 2 ranks; its losses at
steps 11-20 must match DeepSpeed's own steps 11-20 within check_training.py's
bounds (fp32 2e-6 relative, bf16 2e-2), and its lr must equal DeepSpeed's at
every step. At 2 ranks the loss compared is rank 0's; at 1 rank, the mean
over DeepSpeed's two ranks (the same whole batch).

Runs: ZeRO stages 0-3 in fp32 and 1-3 in bf16 (DeepSpeed's bf16 at stage 0
keeps its masters in a wrapper dscore does not import: refused by name).
The universal format too: DeepSpeed's ds_to_universal.py converts the
stage-2 and stage-3 saves, and dscore imports and resumes those the same way.
And saves of two parameter groups (weights and biases apart, as Hugging
Face's Trainer splits them) at stages 1-3.

Usage: check_checkpoint_import.py <dscore binary>
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import check_training as ct

SAVE_AT = 10
RUNS = [("fp32", s) for s in (0, 1, 2, 3)] + [("bf16", s) for s in (1, 2, 3)]
UNIVERSAL = [("fp32", 2), ("fp32", 3), ("bf16", 2)]
# Two parameter groups (weights, biases; the same settings), as Hugging
# Face's Trainer hands DeepSpeed decayed and undecayed parameters.
TWO_GROUPS = [("fp32", s) for s in (1, 2, 3)]


def run(cmd, what, cwd=None):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=ct.DSCORE_RUN_SECONDS,
                         start_new_session=True)
    if out.returncode != 0:
        sys.exit(f"check_checkpoint_import: FAILED: {what}:\n{out.stdout}{out.stderr}")
    return out.stdout


def main():
    dscore = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for dtype, stage, groups in [r + (1,) for r in RUNS] + [r + (2,) for r in TWO_GROUPS]:
            config = ct.config_for(dtype, stage, False)
            config["save_checkpoint_at"] = SAVE_AT
            name = f"{dtype}_s{stage}" + ("_2groups" if groups == 2 else "")
            config["save_checkpoint_dir"] = os.path.join(folder, "deepspeed_" + name)
            if groups == 2:
                config["two_param_groups"] = True
            paths[(dtype, stage, groups)] = os.path.join(folder, name + ".json")
            with open(paths[(dtype, stage, groups)], "w") as f:
                json.dump(config, f)
        started = time.time()
        start = lambda: ct.start_deepspeed(2, list(paths.values()), folder)  # noqa: E731
        result = ct.finish_deepspeed(start(), start, started + ct.DEEPSPEED_SECONDS, "check_checkpoint_import")
        with open(result) as f:
            deepspeed = json.load(f)
        print(f"check_checkpoint_import: DeepSpeed {deepspeed['deepspeed']} trained and saved "
              f"{len(paths)} runs in {time.time() - started:.0f} s")
        sources = [(run_, path, False) for run_, path in paths.items()]
        sources += [(run_ + (1,), paths[run_ + (1,)], True) for run_ in UNIVERSAL]
        for (dtype, stage, groups), path, universal in sources:
            ds = deepspeed["runs"][path]
            with open(path) as f:
                config = json.load(f)
            kind = "universal" if universal else "two-group" if groups == 2 else "saved"
            source = config["save_checkpoint_dir"]
            if universal:
                tag = f"global_step{SAVE_AT}"
                converted = source + "_universal"
                run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                     os.path.join(source, tag), "--output_folder",
                     os.path.join(converted, tag + "_universal"), "--num_extract_workers", "1",
                     "--num_merge_workers", "1", "--inject_missing_state"],
                    f"ds_to_universal.py ({dtype}, stage {stage})")
                with open(os.path.join(converted, "latest_universal"), "w") as f:
                    f.write(tag + "_universal")
                source = converted
            imported = os.path.join(folder, f"imported_{kind}_{dtype}_s{stage}")
            said = run([dscore, "checkpoint", "import", source, imported],
                       f"dscore checkpoint import ({kind}, {dtype}, stage {stage})")
            for key in ("save_checkpoint_at", "save_checkpoint_dir", "two_param_groups"):
                config.pop(key, None)
            for world in (1, 2):
                work = os.path.join(folder, f"dscore_{kind}_{dtype}_s{stage}_w{world}")
                os.makedirs(work)
                config["csv_monitor"] = {"enabled": True, "output_path": "out", "job_name": "csv"}
                with open(os.path.join(work, "config.json"), "w") as f:
                    json.dump(config, f)
                run([dscore, "run", "--config", "config.json", "--resume", imported, "-n", str(world)],
                    f"dscore run --resume ({kind}, {dtype}, stage {stage}, {world} ranks)", cwd=work)
                losses = ct.read_csv(os.path.join(work, "out/csv/Train_Samples_train_loss.csv"), "train_loss")
                lrs = ct.read_csv(os.path.join(work, "out/csv/Train_Samples_lr.csv"), "lr")
                want = (ds["losses"] if world == 2 else ds["mean_losses"])[SAVE_AT:]
                name = f"{kind} {dtype} stage {stage}, resumed at {world} rank{'s' if world > 1 else ''}"
                if len(losses) != len(want):
                    failures.append(f"{name}: dscore logged {len(losses)} losses after the resume, "
                                    f"DeepSpeed {len(want)}")
                    continue
                rel, worst = ct.worst_relative(want, losses)
                lr_ok = lrs == ds["lrs_after"][SAVE_AT:]
                print(f"check_checkpoint_import: {name}: steps {SAVE_AT + 1}-{SAVE_AT + len(want)} max rel "
                      f"{rel:.3g} (step {SAVE_AT + worst + 1}), lr "
                      f"{'equal at every step' if lr_ok else 'DIFFERENT'}")
                if rel > ct.LOSS_RTOL[dtype]:
                    failures.append(f"{name}: step {SAVE_AT + worst + 1} loss DeepSpeed {want[worst]!r}, "
                                    f"dscore {losses[worst]!r}: relative {rel:.3g} > "
                                    f"{ct.LOSS_RTOL[dtype]}")
                if not lr_ok:
                    failures.append(f"{name}: lr DeepSpeed {ds['lrs_after'][SAVE_AT:]}, dscore {lrs}")
            print(f"check_checkpoint_import: {said.splitlines()[0]}")
    for f in failures:
        print(f"check_checkpoint_import: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
