"""The gpt with MoE blocks: dscore against DeepSpeed-MoE on the same model, in one run.

The model: 4 blocks of width 256 (8 heads), every other block an MoE block of
8 experts with top-2 gating (capacity factor 1.25, no RTS or second-expert
sampling, so both sides route alike), context 128, vocabulary 300; 2 ranks
(ep_size 1: every rank holds every expert), ZeRO 1, Adam, micro-batches of
4 x 128 tokens, 2 per step. dscore trains it with `dscore run -n 2`;
DeepSpeed 0.19.8 with its own MoE layer on the CPU accelerator (gloo; one
torch thread per rank, as dscore runs one compute thread per rank on 2
cores), from the same initial values on the same token shard
(tests/external/deepspeed/ds_moe_gpt_worker.py). Each side's tokens/s is
over the steps after the warm-up; the losses of the steps both ran are
compared too. The limits are measured in the same run, before and after:
the fp32 GEMM rate (bench/cpu_gemm_rate) and the host memory rate
(bench/host_memory_rate).

Usage: python3 bench/moe_gpt.py [--dscore build/release/bin/dscore] [--steps 12] [--warmup 2]
Needs the release build (dscore, plugins, cpu_gemm_rate, host_memory_rate), mpirun and the
DeepSpeed venv of tests/external/deepspeed (venv.sh); run it with that venv's python.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = os.path.join(os.path.dirname(HERE), "tests", "external", "deepspeed")
sys.path.insert(0, CHECKS)
sys.path.insert(0, HERE)

import check_moe_training as cmt  # noqa: E402
from check_llama_import import write_shard  # noqa: E402
from parallel_axes import limit  # noqa: E402

T, MICRO, GAS, WORLD = 128, 4, 2, 2
MODEL = {"type": "gpt", "n_layer": 4, "n_head": 8, "n_embd": 256, "block_size": T,
         "vocab_size": 300, "moe_num_experts": 8, "moe_k": 2, "moe_every": 2,
         "moe_capacity_factor": 1.25, "moe_eval_capacity_factor": 2.0, "moe_min_capacity": 4,
         "moe_loss_coeff": 0.01, "moe_use_rts": False, "moe_top2_2nd_expert_sampling": False}
SEED = 3


def dscore_row(dscore, folder, steps, warmup, shard):
    config = {"train_batch_size": MICRO * GAS * WORLD, "train_micro_batch_size_per_gpu": MICRO,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "gradient_clipping": 1.0,
              "zero_optimization": {"stage": 1}, "train_steps": steps, "seed": SEED, "model": MODEL,
              "data": {"type": "tokens", "path": shard, "shuffle": False},
              "csv_monitor": {"enabled": True, "output_path": os.path.join(folder, "out"),
                              "job_name": "csv"}}
    path = os.path.join(folder, "dscore.json")
    with open(path, "w") as f:
        json.dump(config, f)
    out = subprocess.run([dscore, "run", "-n", str(WORLD), "--config", path, "--log-format", "json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"moe bench: FAILED: dscore run:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    progress = [json.loads(line) for line in out.stdout.splitlines()
                if line.startswith("{") and '"type":"progress"' in line]
    t = [r["elapsed_seconds"] for r in progress]
    tokens = (progress[-1]["samples"] - progress[warmup - 1]["samples"]) * T
    # Rank 0's losses, as the worker records DeepSpeed's.
    losses = cmt.ct.read_csv(os.path.join(folder, "out", "csv", "Train_Samples_train_loss.csv"),
                             "train_loss")
    loads = [[r[f"moe/expert_load/{e}"] for e in range(MODEL["moe_num_experts"])] for r in progress]
    return tokens / (t[-1] - t[warmup - 1]), losses, loads


def deepspeed_row(folder, steps, warmup, shard):
    ds_config = {"train_batch_size": MICRO * GAS * WORLD, "train_micro_batch_size_per_gpu": MICRO,
                 "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "gradient_clipping": 1.0,
                 "zero_optimization": {"stage": 1}}
    saved_steps = cmt.STEPS
    cmt.STEPS = steps
    try:
        result = cmt.deepspeed_run(folder, "bench", dict(MODEL, seed=SEED), shard, ds_config, WORLD,
                                   time.time())
    finally:
        cmt.STEPS = saved_steps
    seconds = sum(result["step_seconds"][warmup:])
    tokens = (steps - warmup) * MICRO * GAS * WORLD * T
    return tokens / seconds, result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dscore", default=os.path.join(os.path.dirname(HERE), "build", "release",
                                                         "bin", "dscore"))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    dscore = os.path.abspath(args.dscore)
    tools = {t: os.path.join(os.path.dirname(dscore), t) for t in ("cpu_gemm_rate", "host_memory_rate")}
    gemm_before, gemm_text = limit(tools["cpu_gemm_rate"], "fp32_gflops")
    memory_before, memory_text = limit(tools["host_memory_rate"], "host_memory_gbps")
    with tempfile.TemporaryDirectory() as folder:
        shard = write_shard(os.path.join(folder, "train.bin"), 400 * T + 1)
        ours, our_losses, our_loads = dscore_row(dscore, folder, args.steps, args.warmup, shard)
        theirs, ds = deepspeed_row(folder, args.steps, args.warmup, shard)
    their_losses, version = ds["losses"], ds["deepspeed"]
    # The first step whose routes per expert differ, and DeepSpeed's smallest routing margin there.
    routed = [[round(share * sum(c)) for share in shares] for shares, c in zip(our_loads, ds["counts"])]
    first_route = next((i for i, (a, b) in enumerate(zip(routed, ds["counts"])) if a != b), None)
    gemm_after, _ = limit(tools["cpu_gemm_rate"], "fp32_gflops")
    memory_after, _ = limit(tools["host_memory_rate"], "host_memory_gbps")
    rel = [abs(a - b) / abs(b) for a, b in zip(our_losses, their_losses)]
    agree = next((i for i, r in enumerate(rel) if r > 1e-5), len(rel))
    print(f"MoE gpt (4 blocks x 256, 2 MoE blocks of 8 experts, top-2), 2 ranks, ZeRO 1, "
          f"{MICRO} x {T} tokens x {GAS} micro-batches per rank and step, steps "
          f"{args.warmup + 1}-{args.steps} timed")
    print(f"  dscore                 {ours:10.1f} tokens/s")
    print(f"  DeepSpeed-MoE {version:8s} {theirs:10.1f} tokens/s   (dscore {ours / theirs:.2f}x)")
    print(f"  losses: within 1e-5 relative for steps 1-{agree} of {len(rel)} (largest there "
          f"{max(rel[:agree], default=0):.2g}), {max(rel):.2g} at most over all")
    if first_route is None:
        print("  routes per expert: the same at every step")
    else:
        print(f"  routes per expert: the same up to step {first_route}; step {first_route + 1} "
              f"differs, where DeepSpeed's smallest routing margin is "
              f"{ds['margins'][first_route]:.2g} (below 1e-5: a near-tie the two fp32 summation "
              f"orders may decide either way; tests/external/deepspeed/check_moe_training.py)")
    print(f"  limits: fp32 GEMM {gemm_before:.1f} / {gemm_after:.1f} GFLOP/s (before / after; "
          f"{gemm_text}), host memory {memory_before:.1f} / {memory_after:.1f} GB/s ({memory_text})")


if __name__ == "__main__":
    main()
