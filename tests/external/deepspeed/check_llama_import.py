"""A Hugging Face Llama trained by DeepSpeed, imported by dscore: transformers
builds a tiny LlamaForCausalLM (2 layers, hidden 64, 4 query heads over 2
key/value heads, vocab 300, untied) and saves it; DeepSpeed 0.19.8 trains it
on 2 ranks at ZeRO 1, 2 and 3 (Adam, lr 1e-3) on an llm.c token shard read
as dscore reads it (ds_llama_worker.py), saves after step 10 and trains on to
step 20. dscore imports each save (its parameter names are transformers'
own, as dscore's llama plugin names them) and resumes with
"from_pretrained" on the same folder at 1 and 2 ranks.

Bound: steps 11-20 within 1e-5 relative of DeepSpeed's (1e-5 is what
tests/external/hf/check_llama.py allows one forward pass of these models
against transformers, summed in another order). Measured with DeepSpeed
0.19.8: 1.4e-7 to 2.5e-7. A wrong import (Adam's first moment halved, say)
moves the losses by percents.

Usage: check_llama_import.py <dscore binary>
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import check_training as ct

T = 16
VOCAB = 300
SAVE_AT, STEPS = 10, 20
RTOL = 1e-5
MODEL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             rms_norm_eps=1e-6, initializer_range=0.15, tie_word_embeddings=False,
             attention_bias=False, mlp_bias=False)
BATCH = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
         "optimizer": {"type": "Adam", "params": {"lr": 0.001}}, "gradient_clipping": 1.0}
STAGES = (1, 2, 3)


def run(cmd, what, cwd=None):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=ct.DSCORE_RUN_SECONDS,
                         start_new_session=True)
    if out.returncode != 0:
        sys.exit(f"check_llama_import: FAILED: {what}:\n{out.stdout}{out.stderr}")
    return out.stdout


def save_llama(hf, model):
    """A LlamaForCausalLM of `model`'s config, seeded, saved to folder `hf`."""
    torch.manual_seed(0)
    config = LlamaConfig(**model, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    LlamaForCausalLM(config).float().save_pretrained(hf)
    return hf


def write_shard(shard, count):
    """An llm.c token shard of `count` tokens below VOCAB (seeded)."""
    tokens = np.random.default_rng(5).integers(0, VOCAB, size=count)
    with open(shard, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(tokens.astype(np.uint16).tobytes())
    return shard


def start_ranks(folder, stage, result, hf, shard, save, config, steps=STEPS, save_at=SAVE_AT):
    """DeepSpeed's two ranks of one stage, as ct.start_deepspeed's triple."""
    port, procs, logs = ct.free_port(), [], []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   DS_ACCELERATOR="cpu", PYTHONPATH=ct.HERE, OMP_NUM_THREADS="1",
                   PYTHONFAULTHANDLER="1")
        logs.append(os.path.join(folder, f"ds_s{stage}_r{rank}.log"))
        with open(logs[-1], "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(ct.HERE, "ds_llama_worker.py"), result, hf, shard, str(T),
                 str(steps), str(save_at), save, config], env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs, result, logs


def main():
    dscore = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        hf = save_llama(os.path.join(folder, "llama"), MODEL)
        shard = write_shard(os.path.join(folder, "train.bin"), 40 * T + 1)
        started = time.time()
        jobs = {}
        for stage in STAGES:
            ds_config = dict(BATCH, zero_optimization={"stage": stage})
            path = os.path.join(folder, f"ds_s{stage}.json")
            with open(path, "w") as f:
                json.dump(ds_config, f)
            save = os.path.join(folder, f"deepspeed_s{stage}")
            result = os.path.join(folder, f"result_s{stage}.json")
            start = lambda: start_ranks(folder, stage, result, hf, shard, save, path)  # noqa: E731
            ct.finish_deepspeed(start(), start, started + ct.DEEPSPEED_SECONDS,
                                f"check_llama_import (stage {stage})")
            with open(result) as f:
                jobs[stage] = (save, json.load(f))
        print(f"check_llama_import: DeepSpeed {jobs[1][1]['deepspeed']} trained the Llama at ZeRO "
              f"{', '.join(map(str, STAGES))} in {time.time() - started:.0f} s")
        for stage, (save, ds) in jobs.items():
            imported = os.path.join(folder, f"imported_s{stage}")
            said = run([dscore, "checkpoint", "import", save, imported], f"dscore checkpoint import (stage {stage})")
            print(f"check_llama_import: {said.splitlines()[0]}")
            for world in (1, 2):
                work = os.path.join(folder, f"dscore_s{stage}_w{world}")
                os.makedirs(work)
                config = dict(BATCH, zero_optimization={"stage": stage}, train_steps=STEPS, seed=1,
                              model={"type": "llama", "from_pretrained": hf, "block_size": T},
                              data={"type": "tokens", "path": shard, "shuffle": False},
                              csv_monitor={"enabled": True, "output_path": "out", "job_name": "csv"})
                with open(os.path.join(work, "config.json"), "w") as f:
                    json.dump(config, f)
                run([dscore, "run", "--config", "config.json", "--resume", imported, "-n", str(world)],
                    f"dscore run --resume (stage {stage}, {world} ranks)", cwd=work)
                losses = ct.read_csv(os.path.join(work, "out/csv/Train_Samples_train_loss.csv"), "train_loss")
                want = (ds["losses"] if world == 2 else ds["mean_losses"])[SAVE_AT:]
                name = f"stage {stage}, resumed at {world} rank{'s' if world > 1 else ''}"
                if len(losses) != len(want):
                    failures.append(f"{name}: dscore logged {len(losses)} losses, DeepSpeed {len(want)}")
                    continue
                rel, worst = ct.worst_relative(want, losses)
                print(f"check_llama_import: {name}: steps {SAVE_AT + 1}-{STEPS} max rel {rel:.3g} "
                      f"(step {SAVE_AT + worst + 1}; DeepSpeed {want[worst]:.6f}, dscore {losses[worst]:.6f})")
                if rel > RTOL:
                    failures.append(f"{name}: step {SAVE_AT + worst + 1} relative {rel:.3g} > {RTOL}")
    for f in failures:
        print(f"check_llama_import: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
