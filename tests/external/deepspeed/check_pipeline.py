"""DeepSpeed's pipeline engine as the oracle of dscore's: DeepSpeed 0.19.8's
PipelineModule (1F1B TrainSchedule, CPU accelerator, gloo) and `dscore run`
with "pipeline" train dscore's mlp problem (4 layers, tanh, Adam with
WarmupLR, gas 4; gradient clipping 1.0 under ZeRO 1, off under ZeRO 0, see
config_for) cut into stages by parameter count,
at 2 stages on 2 ranks (ZeRO 0), 2 stages x 2 data-parallel ranks (ZeRO 1)
and 4 stages on 4 ranks. Every step's loss (the last stage's mean over the
micro-batches and the data-parallel ranks, which DeepSpeed's train_batch
returns and dscore's monitor writes under a pipeline) must agree within
the fp32 bound of check_training.py (2e-6 relative); the partitions must be
DeepSpeed's.

Usage: check_pipeline.py <dscore binary>
"""
import copy
import json
import os
import subprocess
import sys
import tempfile
import time

import check_training as ct

RTOL = ct.LOSS_RTOL["fp32"]
# (stages, world, ZeRO stage)
RUNS = [(2, 2, 0), (2, 4, 1), (4, 4, 0)]


def config_for(stages, zero):
    c = copy.deepcopy(ct.REFERENCE)
    c["model"]["activation"] = "tanh"
    c["pipeline"] = {"stages": stages}
    c["zero_optimization"] = {"stage": zero}
    if zero == 0:
        # DeepSpeed's fp32 ZeRO-0 pipeline clips by stage 0's gradients
        # alone (runtime/utils.py clip_grad_norm_ counts a gradient only
        # where mpu.get_model_parallel_rank() == 0, and a pipeline grid's
        # "model parallel" group is the pipe: docs/deepspeed-differences.md);
        # dscore clips by every stage's, as DeepSpeed's ZeRO-1 pipeline does.
        c["gradient_clipping"] = 0.0
    return c


def start_ranks(folder, name, world, args, worker="ds_pipe_worker.py"):
    """`world` ranks of `worker` (argv: the result's path, then `args`), as
    ct.finish_deepspeed takes them."""
    result = os.path.join(folder, f"{name}.json")
    port, procs, logs = ct.free_port(), [], []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   DS_ACCELERATOR="cpu", PYTHONPATH=ct.HERE, OMP_NUM_THREADS="1",
                   PYTHONFAULTHANDLER="1")
        logs.append(os.path.join(folder, f"{name}_r{rank}.log"))
        with open(logs[-1], "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(ct.HERE, worker), result, *args],
                env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs, result, logs


def run_dscore(dscore, folder, name, world, config, label="check_pipeline"):
    """`dscore run` of `config` (a dict) on `world` ranks: its per-step losses
    and its log line naming the cut."""
    work = os.path.join(folder, "dscore_" + name)
    os.makedirs(work)
    config = dict(config, csv_monitor={"enabled": True, "output_path": "out", "job_name": "csv"})
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(config, f)
    out = subprocess.run([dscore, "run", "--config", "config.json", "-n", str(world)], cwd=work,
                         capture_output=True, text=True, timeout=ct.DSCORE_RUN_SECONDS,
                         start_new_session=True)
    if out.returncode != 0:
        sys.exit(f"{label}: FAILED: dscore run ({name}):\n{out.stdout}{out.stderr}")
    parts = next((line for line in out.stdout.splitlines() + out.stderr.splitlines()
                  if "pipeline:" in line), "")
    return ct.read_csv(os.path.join(work, "out/csv/Train_Samples_train_loss.csv"), "train_loss"), parts


def compare(label, what, ds, mine, parts, rtol, failures):
    """DeepSpeed's cut and losses (`ds`) against dscore's; prints the worst
    step, appends what disagrees to `failures`."""
    bounds = ds["parts"]
    if f"stage 1: layers {bounds[1]}-" not in parts:
        failures.append(f"{what}: DeepSpeed cut at {bounds}, dscore said: {parts}")
    if len(mine) != len(ds["losses"]):
        failures.append(f"{what}: dscore logged {len(mine)} losses, DeepSpeed {len(ds['losses'])}")
        return
    rel, worst = ct.worst_relative(ds["losses"], mine)
    print(f"{label}: {what}: layers cut at {bounds}; max rel {rel:.3g} "
          f"(step {worst + 1}; DeepSpeed {ds['losses'][worst]:.7f}, dscore {mine[worst]:.7f})")
    if rel > rtol:
        failures.append(f"{what}: step {worst + 1} relative {rel:.3g} > {rtol}")


def main():
    dscore = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        started = time.time()
        results = {}
        for stages, world, zero in RUNS:
            name = f"pp{stages}_w{world}_zero{zero}"
            path = os.path.join(folder, name + "_config.json")
            config = config_for(stages, zero)
            with open(path, "w") as f:
                json.dump(config, f)
            start = lambda: start_ranks(folder, name, world, [path])  # noqa: E731
            result = ct.finish_deepspeed(start(), start, time.time() + ct.DEEPSPEED_SECONDS,
                                         f"check_pipeline ({name})")
            with open(result) as f:
                results[name] = (json.load(f), run_dscore(dscore, folder, name, world, config))
        version = next(iter(results.values()))[0]["deepspeed"]
        print(f"check_pipeline: DeepSpeed {version} PipelineModule and dscore, {len(RUNS)} pipelines "
              f"in {time.time() - started:.0f} s")
        for (stages, world, zero), (name, (ds, (mine, parts))) in zip(RUNS, results.items()):
            what = f"{stages} stages x {world // stages} data-parallel, ZeRO {zero} ({ds['optimizer']})"
            compare("check_pipeline", what, ds, mine, parts, RTOL, failures)
    for f in failures:
        print(f"check_pipeline: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
