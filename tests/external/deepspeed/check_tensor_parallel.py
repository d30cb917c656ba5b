"""Tensor parallelism against DeepSpeed's AutoTP training: transformers builds
a tiny LlamaForCausalLM (2 layers, hidden 64, 4 query heads over 2
key/value heads, vocab 300, untied) and saves it; DeepSpeed 0.19.8 trains it
with "tensor_parallel": {"autotp_size": 2} on 2 ranks (gloo, its CPU
accelerator) at ZeRO 1, 2 and 3 (Adam, lr 1e-3, clipping 1.0) on an llm.c
token shard read as dscore reads it (ds_llama_worker.py: both ranks of the
tensor-parallel group read the same samples); `dscore run` trains the same
folder (from_pretrained: each rank reads its slices) with the same section
at -n 2.

Bound: every step's loss within 1e-5 relative of DeepSpeed's (the ZeRO
oracle's bound, tests/external/deepspeed/check_llama_import.py). Measured:
8.8e-7, 8.8e-7 and 9.3e-7 at stages 1, 2 and 3 (12 steps).

DeepSpeed 0.19.8 resolves the batch triad before AutoTP makes its
data-parallel group, over every rank: its train_batch_size here counts the
tensor-parallel ranks too (micro x gas x 2), while dscore's counts
data-parallel ranks only (micro x gas x 1); both run the same samples per
step.

Usage: check_tensor_parallel.py <dscore binary>
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import check_training as ct
from check_llama_import import MODEL, T, save_llama, start_ranks, write_shard

STEPS = 12
RTOL = 1e-5
MICRO, GAS, TP = 2, 2, 2
STAGES = (1, 2, 3)


def dscore_losses(dscore, folder, stage, hf, shard, section, ranks, name, batch):
    work = os.path.join(folder, f"dscore_s{stage}")
    os.makedirs(work)
    config = dict({"train_batch_size": batch, "train_micro_batch_size_per_gpu": MICRO,
                   "optimizer": {"type": "Adam", "params": {"lr": 0.001}}, "gradient_clipping": 1.0,
                   "zero_optimization": {"stage": stage}, "train_steps": STEPS, "seed": 1,
                   "model": {"type": "llama", "from_pretrained": hf, "block_size": T},
                   "data": {"type": "tokens", "path": shard, "shuffle": False},
                   "csv_monitor": {"enabled": True, "output_path": "out", "job_name": "csv"}}, **section)
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(config, f)
    out = subprocess.run([dscore, "run", "--config", "config.json", "-n", str(ranks)], cwd=work,
                         capture_output=True, text=True, timeout=ct.DSCORE_RUN_SECONDS,
                         start_new_session=True)
    if out.returncode != 0:
        sys.exit(f"{name}: FAILED: dscore run (stage {stage}):\n{out.stdout}{out.stderr}")
    return ct.read_csv(os.path.join(work, "out/csv/Train_Samples_train_loss.csv"), "train_loss")


def compare_with_deepspeed(dscore, name, label, section, ds_batch, ranks, stages, save_model=None,
                           dscore_batch=MICRO * GAS):
    """DeepSpeed (ds_llama_worker.py on `ranks` ranks) and `dscore run` train
    the same Hugging Face model (save_model(folder): the Llama of MODEL by
    default) with the config keys `section` at each ZeRO stage; exits 1
    unless every step's losses agree within RTOL. ds_batch and dscore_batch:
    DeepSpeed's and dscore's train_batch_size for the same samples."""
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        hf = os.path.join(folder, "model")
        save_model(hf) if save_model else save_llama(hf, MODEL)
        shard = write_shard(os.path.join(folder, "train.bin"), 40 * T + 1)
        started = time.time()
        for stage in stages:
            ds_config = dict({"train_batch_size": ds_batch, "train_micro_batch_size_per_gpu": MICRO,
                              "optimizer": {"type": "Adam", "params": {"lr": 0.001}},
                              "gradient_clipping": 1.0, "zero_optimization": {"stage": stage}},
                             **section)
            path = os.path.join(folder, f"ds_s{stage}.json")
            with open(path, "w") as f:
                json.dump(ds_config, f)
            result = os.path.join(folder, f"result_s{stage}.json")
            save = os.path.join(folder, f"unused_s{stage}")
            start = lambda: start_ranks(folder, stage, result, hf, shard, save, path, STEPS, 0)  # noqa: E731
            ct.finish_deepspeed(start(), start, started + ct.DEEPSPEED_SECONDS, f"{name} (stage {stage})")
            with open(result) as f:
                ds = json.load(f)
            losses = dscore_losses(dscore, folder, stage, hf, shard, section, ranks, name,
                                   dscore_batch)
            want = ds["losses"]
            if len(losses) != len(want):
                failures.append(f"stage {stage}: dscore logged {len(losses)} losses, DeepSpeed {len(want)}")
                continue
            rel, worst = ct.worst_relative(want, losses)
            print(f"{name}: {label}, ZeRO {stage} (DeepSpeed {ds['deepspeed']}): steps "
                  f"1-{STEPS} max rel {rel:.3g} (step {worst + 1}; DeepSpeed {want[worst]:.6f}, "
                  f"dscore {losses[worst]:.6f}); bound {RTOL}")
            if rel > RTOL:
                failures.append(f"stage {stage}: step {worst + 1} relative {rel:.3g} > {RTOL}")
        print(f"{name}: done in {time.time() - started:.0f} s")
    for f in failures:
        print(f"{name}: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


def main():
    compare_with_deepspeed(os.path.abspath(sys.argv[1]), "check_tensor_parallel", f"AutoTP {TP}",
                           {"tensor_parallel": {"autotp_size": TP}}, MICRO * GAS * TP, TP, STAGES)


if __name__ == "__main__":
    main()
