"""The gpt with MoE blocks: dscore against DeepSpeed-MoE on the same model, in one run,
with every rank holding every expert (ep 1) and with the experts spread over the 2 ranks (ep 2).

The model: 4 blocks of width 256 (8 heads), every other block an MoE block of
8 experts with top-2 gating (capacity factor 1.25, no RTS or second-expert
sampling, so both sides route alike), context 128, vocabulary 300; 2 ranks,
ZeRO 1, Adam, micro-batches of 4 x 128 tokens, 2 per step. dscore trains it
with `dscore run -n 2` (ep 2: "expert_parallel": {"enabled": true,
"autoep_size": 2}); DeepSpeed 0.19.8 with its own MoE layer (ep_size 1 and 2)
on the CPU accelerator (gloo; one torch thread per rank, as dscore runs one
compute thread per rank on 2 cores), from the same initial values on the same
token shard (tests/external/deepspeed/ds_moe_gpt_worker.py). Each side's
tokens/s is over the steps after the warm-up; the losses of the steps both
ran are compared too. At ep 2 it also prints dscore's all-to-all bytes per
step (the model's moe/all_to_all_bytes: what its token exchanges handed the
expert group's all_to_all_v, all ranks) against the formula 4 x kept routes x
C x 4 bytes + the counts' E x 8 bytes per rank and exchange; at both, each
rank's peak memory (VmHWM) against its plan (memory_breakdown). The limits are
measured in the same run, before and after: the fp32 GEMM rate
(bench/cpu_gemm_rate) and the host memory rate (bench/host_memory_rate).

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


def dscore_row(dscore, folder, steps, warmup, shard, ep=1):
    config = {"train_batch_size": MICRO * GAS * WORLD, "train_micro_batch_size_per_gpu": MICRO,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "gradient_clipping": 1.0,
              "zero_optimization": {"stage": 1}, "train_steps": steps, "seed": SEED, "model": MODEL,
              "data": {"type": "tokens", "path": shard, "shuffle": False},
              "memory_breakdown": True, "steps_per_print": steps,
              "csv_monitor": {"enabled": True, "output_path": os.path.join(folder, f"out{ep}"),
                              "job_name": "csv"}}
    if ep > 1:
        config["expert_parallel"] = {"enabled": True, "autoep_size": ep}
    path = os.path.join(folder, f"dscore_ep{ep}.json")
    with open(path, "w") as f:
        json.dump(config, f)
    out = subprocess.run([dscore, "run", "-n", str(WORLD), "--config", path, "--log-format", "json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"moe bench: FAILED: dscore run:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    records = [json.loads(line) for line in (out.stdout + out.stderr).splitlines()
               if line.startswith("{")]
    progress = [r for r in records if r.get("type") == "progress"]
    t = [r["elapsed_seconds"] for r in progress]
    tokens = (progress[-1]["samples"] - progress[warmup - 1]["samples"]) * T
    # Rank 0's losses, as the worker records DeepSpeed's.
    losses = cmt.ct.read_csv(os.path.join(folder, f"out{ep}", "csv",
                                          "Train_Samples_train_loss.csv"), "train_loss")
    loads = [[r[f"moe/expert_load/{e}"] for e in range(MODEL["moe_num_experts"])] for r in progress]
    # memory_breakdown: each rank's planned peak and its VmHWM.
    memory = {}
    for r in records:
        m = re.search(r"peak: planned (\d+) bytes, peak RSS \(VmHWM\) (\d+) bytes",
                      r.get("message", ""))
        if m:
            memory[r["rank"]] = (int(m.group(1)), int(m.group(2)))
    return {"tokens_per_second": tokens / (t[-1] - t[warmup - 1]), "losses": losses,
            "loads": loads, "progress": progress, "memory": memory}


def deepspeed_row(folder, steps, warmup, shard, ep=1):
    ds_config = {"train_batch_size": MICRO * GAS * WORLD, "train_micro_batch_size_per_gpu": MICRO,
                 "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "gradient_clipping": 1.0,
                 "zero_optimization": {"stage": 1}}
    saved_steps = cmt.STEPS
    cmt.STEPS = steps
    try:
        result = cmt.deepspeed_run(folder, f"bench_ep{ep}", dict(MODEL, seed=SEED, ep_size=ep), shard,
                                   ds_config, WORLD, time.time())
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
        ours = {ep: dscore_row(dscore, folder, args.steps, args.warmup, shard, ep) for ep in (1, 2)}
        theirs = {ep: deepspeed_row(folder, args.steps, args.warmup, shard, ep) for ep in (1, 2)}
    gemm_after, _ = limit(tools["cpu_gemm_rate"], "fp32_gflops")
    memory_after, _ = limit(tools["host_memory_rate"], "host_memory_gbps")
    version = theirs[1][1]["deepspeed"]
    print(f"MoE gpt (4 blocks x 256, 2 MoE blocks of 8 experts, top-2), 2 ranks, ZeRO 1, "
          f"{MICRO} x {T} tokens x {GAS} micro-batches per rank and step, steps "
          f"{args.warmup + 1}-{args.steps} timed")
    for ep in (1, 2):
        mine, (their_rate, ds) = ours[ep], theirs[ep]
        rate = mine["tokens_per_second"]
        print(f"  ep {ep}: dscore {rate:10.1f} tokens/s   DeepSpeed-MoE {version} {their_rate:10.1f} "
              f"tokens/s   (dscore {rate / their_rate:.2f}x)")
        rel = [abs(a - b) / abs(b) for a, b in zip(mine["losses"], ds["losses"])]
        agree = next((i for i, r in enumerate(rel) if r > 1e-5), len(rel))
        print(f"        losses against DeepSpeed's: within 1e-5 relative for steps 1-{agree} of "
              f"{len(rel)} (largest there {max(rel[:agree], default=0):.2g}), {max(rel):.2g} at "
              f"most over all")
        routed = [[round(share * sum(c)) for share in shares]
                  for shares, c in zip(mine["loads"], ds["counts"])]
        first = next((i for i, (a, b) in enumerate(zip(routed, ds["counts"])) if a != b), None)
        if first is None:
            print("        routes per expert: the same as DeepSpeed's at every step")
        else:
            print(f"        routes per expert: DeepSpeed's up to step {first}; step {first + 1} "
                  f"differs, where DeepSpeed's smallest routing margin is {ds['margins'][first]:.2g} "
                  f"(below 1e-5: a near-tie the two fp32 summation orders may decide either way)")
    two, one = ours[2], ours[1]
    print(f"  ep 2 against ep 1 (dscore): {two['tokens_per_second'] / one['tokens_per_second']:.2f}x "
          f"the tokens/s; losses within "
          f"{max(abs(a - b) / abs(b) for a, b in zip(two['losses'], one['losses'])):.2g} relative")
    # The formula: per MoE block, micro-batch and rank, E x 8 bytes of counts; over the ranks,
    # each kept route's row of C floats out and back in forward and again in backward.
    C, E, k = MODEL["n_embd"], MODEL["moe_num_experts"], MODEL["moe_k"]
    blocks = MODEL["n_layer"] // MODEL["moe_every"]
    routes = k * MICRO * T * blocks * GAS * WORLD
    worst = 0.0
    for r in two["progress"]:
        kept = routes - r["moe/dropped_routes"]
        formula = 4 * kept * C * 4 + E * 8 * blocks * GAS * WORLD
        worst = max(worst, abs(r["moe/all_to_all_bytes"] - formula) / formula)
    last = two["progress"][-1]
    print(f"  ep 2 all-to-all bytes per step (all ranks): {last['moe/all_to_all_bytes']:.0f} at the "
          f"last step; against 4 x kept routes x C x 4 B + counts, within {worst:.2g} relative at "
          f"every step")
    for ep in (1, 2):
        for rank, (planned, peak) in sorted(ours[ep]["memory"].items()):
            print(f"  ep {ep} rank {rank} memory: peak RSS {peak / 2**20:.1f} MiB, planned "
                  f"{planned / 2**20:.1f} MiB (plan/measured {planned / peak:.3f})")
    print(f"  limits: fp32 GEMM {gemm_before:.1f} / {gemm_after:.1f} GFLOP/s (before / after; "
          f"{gemm_text}), host memory {memory_before:.1f} / {memory_after:.1f} GB/s ({memory_text})")


if __name__ == "__main__":
    main()
