"""Ulysses sequence parallelism against DeepSpeed's: transformers builds a
tiny LlamaForCausalLM (2 layers, hidden 64, 4 query heads over 2 key/value
heads, vocab 300, untied) and saves it; DeepSpeed 0.19.8 trains it with
"sequence_parallel_size": 2 on 2 ranks (gloo, its CPU accelerator) at ZeRO
1, 2 and 3 (Adam, lr 1e-3, clipping 1.0) through its ALST attention for
Hugging Face models (UlyssesSPAttentionHF over sdpa: the all-to-alls around
attention) and its sequence-data-parallel gradient reduction, each rank
feeding its slice of every sample's positions (ds_llama_worker.py); `dscore
run` trains the same folder with the same key at -n 2.

Bound: every step's loss within 1e-5 relative of DeepSpeed's (the ZeRO
oracle's bound, tests/external/deepspeed/check_llama_import.py). Measured:
1.2e-6 at each stage (12 steps).

DeepSpeed leaves the loss to the user under Ulysses (its tutorial gathers
the slices' mean losses and weights them by their tokens); the worker
computes each slice's share of the samples' mean directly, which is what
dscore's model plugins compute and what DeepSpeed's gradient reduction
(a sum over the sequence group, divided by world / sp) expects.

Usage: check_sequence_parallel.py <dscore binary>
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
MICRO, GAS, SP = 2, 2, 2
STAGES = (1, 2, 3)


def dscore_losses(dscore, folder, stage, hf, shard):
    work = os.path.join(folder, f"dscore_s{stage}")
    os.makedirs(work)
    config = {"train_batch_size": MICRO * GAS, "train_micro_batch_size_per_gpu": MICRO,
              "optimizer": {"type": "Adam", "params": {"lr": 0.001}}, "gradient_clipping": 1.0,
              "zero_optimization": {"stage": stage}, "sequence_parallel_size": SP,
              "train_steps": STEPS, "seed": 1,
              "model": {"type": "llama", "from_pretrained": hf, "block_size": T},
              "data": {"type": "tokens", "path": shard, "shuffle": False},
              "csv_monitor": {"enabled": True, "output_path": "out", "job_name": "csv"}}
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(config, f)
    out = subprocess.run([dscore, "run", "--config", "config.json", "-n", str(SP)], cwd=work,
                         capture_output=True, text=True, timeout=ct.DSCORE_RUN_SECONDS,
                         start_new_session=True)
    if out.returncode != 0:
        sys.exit(f"check_sequence_parallel: FAILED: dscore run (stage {stage}):\n{out.stdout}{out.stderr}")
    return ct.read_csv(os.path.join(work, "out/csv/Train_Samples_train_loss.csv"), "train_loss")


def main():
    dscore = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        hf = save_llama(os.path.join(folder, "llama"), MODEL)
        shard = write_shard(os.path.join(folder, "train.bin"), 40 * T + 1)
        started = time.time()
        for stage in STAGES:
            # DeepSpeed's batch triad counts world / sequence_parallel_size ranks.
            ds_config = {"train_batch_size": MICRO * GAS, "train_micro_batch_size_per_gpu": MICRO,
                         "optimizer": {"type": "Adam", "params": {"lr": 0.001}},
                         "gradient_clipping": 1.0, "zero_optimization": {"stage": stage},
                         "sequence_parallel_size": SP}
            path = os.path.join(folder, f"ds_sp_s{stage}.json")
            with open(path, "w") as f:
                json.dump(ds_config, f)
            result = os.path.join(folder, f"result_sp_s{stage}.json")
            save = os.path.join(folder, f"unused_s{stage}")
            start = lambda: start_ranks(folder, stage, result, hf, shard, save, path, STEPS, 0)  # noqa: E731
            ct.finish_deepspeed(start(), start, started + ct.DEEPSPEED_SECONDS,
                                f"check_sequence_parallel (stage {stage})")
            with open(result) as f:
                ds = json.load(f)
            losses = dscore_losses(dscore, folder, stage, hf, shard)
            want = ds["losses"]
            if len(losses) != len(want):
                failures.append(f"stage {stage}: dscore logged {len(losses)} losses, DeepSpeed {len(want)}")
                continue
            rel, worst = ct.worst_relative(want, losses)
            print(f"check_sequence_parallel: Ulysses 2, ZeRO {stage} (DeepSpeed {ds['deepspeed']}): "
                  f"steps 1-{STEPS} max rel {rel:.3g} (step {worst + 1}; DeepSpeed {want[worst]:.6f}, "
                  f"dscore {losses[worst]:.6f}); bound {RTOL}")
            if rel > RTOL:
                failures.append(f"stage {stage}: step {worst + 1} relative {rel:.3g} > {RTOL}")
        print(f"check_sequence_parallel: done in {time.time() - started:.0f} s")
    for f in failures:
        print(f"check_sequence_parallel: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
