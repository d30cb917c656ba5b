"""One rank of a DeepSpeed run of dscore's mlp problem (dscore_mlp.py), on
DeepSpeed's CPU accelerator with gloo. Started by check_training.py with
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and DS_ACCELERATOR=cpu
set; rank 0 writes the result as JSON.

Usage: ds_train_worker.py <result.json> <config.json>...
Each config is a ds_config.json with dscore's "model", "seed" and
"train_steps"; the runs go one after another in this process, each with a
fresh engine. A config may also name "save_checkpoint_at" (a step) and
"save_checkpoint_dir": the engine saves its checkpoint there after that step
and trains on (check_checkpoint_import.py); or "load_checkpoint_dir": the
engine loads that checkpoint first and trains from its step on
(check_checkpoint_export.py). (DeepSpeed's CPU FusedAdam keeps its step counter in one
process-wide C++ optimizer; a new engine's step 1 resets its beta powers
through std::pow(beta, 1) == beta, and later steps take the running
product again, so the arithmetic is that of a fresh process.)
"""
import json
import os
import sys

import deepspeed
import torch

import dscore_mlp

# The keys only `dscore run` reads (DeepSpeed ignores unknown top-level keys,
# but handing it only its own keeps the two configs' overlap explicit).
DSCORE_ONLY = {"model", "data", "train_steps", "seed", "csv_monitor", "plugins", "comm",
               "checkpoint_dir", "save_checkpoint_at", "save_checkpoint_dir", "load_checkpoint_dir",
               "two_param_groups"}


def train(config_path):
    with open(config_path) as f:
        config = json.load(f)
    model_cfg, seed, steps = config["model"], config["seed"], config["train_steps"]
    ds_config = {k: v for k, v in config.items() if k not in DSCORE_ONLY}
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    teacher = dscore_mlp.Teacher(model_cfg["teacher_seed"], model_cfg["input_dim"], model_cfg["output_dim"])
    model = dscore_mlp.Mlp(seed, model_cfg["input_dim"], model_cfg["hidden_dim"], model_cfg["output_dim"],
                           model_cfg["n_hidden_layers"])
    parameters = model.parameters()
    if config.get("two_param_groups"):
        named = list(model.named_parameters())
        parameters = [{"params": [p for n, p in named if n.endswith("weight")]},
                      {"params": [p for n, p in named if not n.endswith("weight")]}]
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=parameters, config=ds_config)
    train, micro = engine.train_batch_size(), engine.train_micro_batch_size_per_gpu()
    gas = engine.gradient_accumulation_steps()

    losses, mean_losses, lrs_applied, lrs_after = [], [], [], []
    start = 0
    if config.get("load_checkpoint_dir"):
        path, _ = engine.load_checkpoint(config["load_checkpoint_dir"])
        if path is None:
            raise RuntimeError(f"DeepSpeed loaded nothing from {config['load_checkpoint_dir']}")
        start = engine.global_steps
    for step in range(start, steps):
        rank_loss = 0.0
        for m in range(gas):
            first = dscore_mlp.micro_batch_first_sample(step, m, rank, world, train, micro)
            x, y = dscore_mlp.synthetic_samples(seed, teacher, first, micro)
            loss = engine(x, y)
            engine.backward(loss)
            rank_loss += engine.module.last_loss / gas  # as dscore's engine accumulates it
            if m == gas - 1:
                lrs_applied.append(engine.get_lr()[0])  # the lr this update uses
            engine.step()
        losses.append(rank_loss)
        mean = torch.tensor([rank_loss], dtype=torch.float64)
        torch.distributed.all_reduce(mean)
        mean_losses.append(mean.item() / world)  # every rank's micro-batches: the whole batch
        lrs_after.append(engine.get_lr()[0])  # the monitor's Train/Samples/lr
        if step + 1 == config.get("save_checkpoint_at"):
            engine.save_checkpoint(config["save_checkpoint_dir"])
    basic = getattr(engine, "basic_optimizer", None) or engine.optimizer
    result = {"losses": losses, "mean_losses": mean_losses, "lrs_applied": lrs_applied, "lrs_after": lrs_after,
              "optimizer": type(basic).__name__, "wrapper": type(engine.optimizer).__name__, "gas": gas}
    engine.destroy()
    return result


def main():
    result_path, config_paths = sys.argv[1], sys.argv[2:]
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    torch.set_num_threads(1)
    results = {path: train(path) for path in config_paths}
    if torch.distributed.get_rank() == 0:
        with open(result_path, "w") as f:
            json.dump({"runs": results, "deepspeed": deepspeed.__version__, "torch": torch.__version__}, f)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
