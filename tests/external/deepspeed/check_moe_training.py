"""The gpt with MoE blocks trained by dscore and by DeepSpeed-MoE: the same
model in torch with DeepSpeed's own MoE layer (deepspeed.moe.layer.MoE, its
TopKGate and MOELayer) as every other block's MLP, from the same initial
values (ds_moe_gpt_worker.py replays the gpt plugin's counter-based init),
on the same llm.c token shard in the same sample order, 2 ranks (gloo, the
CPU accelerator; ep_size 1), ZeRO 0, 1 and 2 (Adam, lr 1e-2, clipping 1.0),
the loss the cross-entropy plus moe_loss_coeff times the blocks' l_aux.

Cases: top-1 without RTS and top-2 without second-expert sampling (the
routing is then a function of the logits alone), both with a capacity
that drops routes, and top-2 with PR-MoE's residual MLP. First the
untrained model's evaluation loss on one sample (`dscore forward` against
the torch model in eval mode: eval_capacity_factor), then every step's
training loss.

Bound: every step's routes per expert equal DeepSpeed's (its exp_counts
against dscore's moe/expert_load events) and its loss within 1e-5 relative
(the ZeRO oracle's bound, check_llama_import.py), up to the first step whose
routing holds a near-tie: two gate logits that decide a token's experts
within TIE of each other (the worker measures each step's smallest such
margin in DeepSpeed's run). The two sides' fp32 logits differ by their
summation order (~1e-7 relative), so at a near-tie either may pick either
expert, and from there the runs differ, both right: the comparison stops
before that step, and at least MIN_STEPS steps must have been compared.
Routes that differ at a step without a near-tie fail.

Usage: check_moe_training.py <dscore binary>
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import check_training as ct
from check_llama_import import write_shard

STEPS = 8
LR = 0.01  # large enough that the 8 steps move the loss on random tokens
RTOL = 1e-5
TIE = 1e-5
MIN_STEPS = 3
MICRO, GAS, WORLD = 2, 2, 2
STAGES = (0, 1, 2)
T = 32
VOCAB = 300

BASE = {"type": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": T,
        "vocab_size": VOCAB, "moe_num_experts": 4, "moe_every": 2, "moe_capacity_factor": 1.0,
        "moe_eval_capacity_factor": 1.5, "moe_min_capacity": 2, "moe_loss_coeff": 0.1,
        "moe_use_rts": False, "moe_top2_2nd_expert_sampling": False}
CASES = [
    ("top1", dict(BASE, moe_k=1)),
    ("top2", dict(BASE, moe_k=2, moe_capacity_factor=0.75)),
    ("top2_residual", dict(BASE, moe_k=2, moe_use_residual=True)),
]
SEED = 7


def start_worker(folder, tag, result, model, shard, config, ranks):
    """DeepSpeed's ranks (ds_moe_gpt_worker.py), as ct.start_deepspeed's triple."""
    port, procs, logs = ct.free_port(), [], []
    for rank in range(ranks):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks),
                   LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   DS_ACCELERATOR="cpu", PYTHONPATH=ct.HERE, OMP_NUM_THREADS="1",
                   PYTHONFAULTHANDLER="1")
        logs.append(os.path.join(folder, f"ds_{tag}_r{rank}.log"))
        with open(logs[-1], "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(ct.HERE, "ds_moe_gpt_worker.py"), result, model, shard,
                 str(STEPS), config], env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs, result, logs


def deepspeed_run(folder, tag, model, shard, ds_config, ranks, started):
    model_path = os.path.join(folder, f"model_{tag}.json")
    with open(model_path, "w") as f:
        json.dump(model, f)
    config_path = os.path.join(folder, f"ds_{tag}.json")
    with open(config_path, "w") as f:
        json.dump(ds_config, f)
    result = os.path.join(folder, f"result_{tag}.json")
    start = lambda: start_worker(folder, tag, result, model_path, shard, config_path, ranks)  # noqa: E731
    ct.finish_deepspeed(start(), start, started + ct.DEEPSPEED_SECONDS, f"check_moe_training ({tag})")
    with open(result) as f:
        return json.load(f)


def dscore_config(model, shard, stage):
    return {"train_batch_size": MICRO * GAS * WORLD, "train_micro_batch_size_per_gpu": MICRO,
            "optimizer": {"type": "Adam", "params": {"lr": LR}}, "gradient_clipping": 1.0,
            "zero_optimization": {"stage": stage}, "train_steps": STEPS, "seed": SEED,
            "model": model, "data": {"type": "tokens", "path": shard, "shuffle": False},
            "csv_monitor": {"enabled": True, "output_path": "out", "job_name": "csv"}}


def dscore_losses(dscore, folder, tag, config):
    work = os.path.join(folder, f"dscore_{tag}")
    os.makedirs(work)
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(config, f)
    out = subprocess.run([dscore, "run", "--config", "config.json", "-n", str(WORLD)], cwd=work,
                         capture_output=True, text=True, timeout=ct.DSCORE_RUN_SECONDS,
                         start_new_session=True)
    if out.returncode != 0:
        sys.exit(f"check_moe_training: FAILED: dscore run ({tag}):\n{out.stdout}{out.stderr}")
    return ct.read_csv(os.path.join(work, "out/csv/Train_Samples_train_loss.csv"), "train_loss")


def dscore_forward_loss(dscore, folder, tag, config, sample):
    path = os.path.join(folder, f"forward_{tag}.json")
    with open(path, "w") as f:
        json.dump(config, f)
    out = subprocess.run([dscore, "forward", "--config", path, "--tokens",
                          ",".join(str(t) for t in sample)], capture_output=True, text=True,
                         timeout=ct.DSCORE_RUN_SECONDS)
    if out.returncode != 0:
        sys.exit(f"check_moe_training: FAILED: dscore forward ({tag}):\n{out.stdout}{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])["loss"]


def dscore_counts(folder, tag, ds_counts):
    """dscore's routes per expert each step: its moe/expert_load shares times
    the step's routes (the same number on both sides: tokens x k x blocks)."""
    csv = os.path.join(folder, f"dscore_{tag}", "out", "csv")
    shares = [ct.read_csv(os.path.join(csv, f"Train_Samples_moe_expert_load_{e}.csv"), str(e))
              for e in range(len(ds_counts[0]))]
    return [[float(round(share[step] * sum(ds_counts[step]))) for share in shares]
            for step in range(len(ds_counts))]


def main():
    dscore = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        shard = write_shard(os.path.join(folder, "train.bin"), 60 * T + 1)
        from ds_llama_worker import read_shard
        prompt = read_shard(shard)[:T].tolist()  # dscore forward's prompt: T - 1 targets
        started = time.time()
        for name, model in CASES:
            model = dict(model, seed=SEED)
            dscore_model = {k: v for k, v in model.items() if k != "seed"}
            # The untrained model, evaluation mode, one sample.
            ds = deepspeed_run(folder, f"{name}_forward", dict(model, check_forward=True), shard,
                               {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
                                "optimizer": {"type": "Adam", "params": {"lr": 0.001}}}, 1, started)
            ours = dscore_forward_loss(dscore, folder, name,
                                       dscore_config(dscore_model, shard, 0), prompt)
            rel = abs(ours - ds["forward_loss"]) / abs(ds["forward_loss"])
            print(f"check_moe_training: {name}: untrained evaluation loss dscore {ours:.7f}, "
                  f"DeepSpeed {ds['forward_loss']:.7f} (rel {rel:.3g})")
            if rel > RTOL:
                failures.append(f"{name}: evaluation loss relative {rel:.3g} > {RTOL}")
            for stage in STAGES:
                tag = f"{name}_s{stage}"
                ds = deepspeed_run(folder, tag, model, shard,
                                   {"train_batch_size": MICRO * GAS * WORLD,
                                    "train_micro_batch_size_per_gpu": MICRO,
                                    "optimizer": {"type": "Adam", "params": {"lr": LR}},
                                    "gradient_clipping": 1.0, "zero_optimization": {"stage": stage}},
                                   WORLD, started)
                losses = dscore_losses(dscore, folder, tag, dscore_config(dscore_model, shard, stage))
                want = ds["losses"]
                if len(losses) != len(want):
                    failures.append(f"{tag}: dscore logged {len(losses)} losses, DeepSpeed {len(want)}")
                    continue
                margins = ds["margins"]
                ours_counts = dscore_counts(folder, tag, ds["counts"])
                compared = STEPS
                for step in range(STEPS):
                    if ours_counts[step] != ds["counts"][step]:
                        compared = step
                        break
                if compared < STEPS and margins[compared] >= TIE:
                    failures.append(f"{tag}: step {compared + 1} routes differ (DeepSpeed "
                                    f"{ds['counts'][compared]}, dscore {ours_counts[compared]}) where "
                                    f"no decision is a near-tie (margin {margins[compared]:.2g})")
                rel, worst = ct.worst_relative(want[:compared], losses[:compared])
                tie = "" if compared == STEPS else (
                    f"; step {compared + 1} routes a near-tie (margin {margins[compared]:.2g}) "
                    f"differently: compared steps 1-{compared}")
                print(f"check_moe_training: {name}, ZeRO {stage} (DeepSpeed {ds['deepspeed']}): loss "
                      f"{want[0]:.4f} -> {want[-1]:.4f} over steps 1-{STEPS}, max rel {rel:.3g} "
                      f"(step {worst + 1}; DeepSpeed {want[worst]:.6f}, dscore {losses[worst]:.6f}); "
                      f"bound {RTOL}; smallest routing margin {min(margins[:compared]):.2g}{tie}")
                if rel > RTOL:
                    failures.append(f"{tag}: step {worst + 1} relative {rel:.3g} > {RTOL} (its smallest "
                                    f"routing margin {margins[worst]:.2g})")
                if compared < MIN_STEPS:
                    failures.append(f"{tag}: only {compared} steps before a near-tie; "
                                    f"want {MIN_STEPS}")
        print(f"check_moe_training: done in {time.time() - started:.0f} s")
    for f in failures:
        print(f"check_moe_training: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
