"""Tensor and sequence parallelism against data parallelism, measured in one run.

The ~100M Llama of bench/peer (12 layers, hidden 768, 12 heads over 4
key/value heads, SwiGLU 2048, vocabulary 32000, tied embeddings; random
initial weights, the shape alone matters here), micro-batches of 4 x 256
tokens, ZeRO-0, trained by `dscore run` on 2 ranks in each row:

  dp2     2 data-parallel ranks
  tp2     "tensor_parallel": {"autotp_size": 2}
  sp2     "sequence_parallel_size": 2 (Ulysses)
  pp2-tp2 2 pipeline stages x TP=2 on 4 ranks (asked for by name)

Each row prints tokens/s over the timed steps (after the warm-up), the bytes
its collectives moved per step as the comms_logger counted them (every group:
the data-parallel reduction, the tensor-parallel allreduces, the sequence
group's all-to-alls, the pipeline's sends), the same volume from the
formula of docs/parallelism.md, and the time the collectives took against
what the host's memory rate allows for them (on one machine the MPI
transport copies through memory). The limits are measured in the same run:
the fp32 GEMM rate (bench/cpu_gemm_rate) and the host memory rate
(bench/host_memory_rate), before and after the rows.

Usage: python3 bench/parallel_axes.py [--dscore build/release/bin/dscore] [--rows dp2,tp2,sp2]
                                      [--steps 3] [--warmup 1] [--keep]
Needs the release build of dscore, its plugins, cpu_gemm_rate and host_memory_rate, and mpirun.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LLAMA = {"type": "llama", "vocab_size": 32000, "hidden_size": 768, "intermediate_size": 2048,
         "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 4,
         "max_position_embeddings": 1024, "block_size": 256, "tie_word_embeddings": True}
MICRO, GAS = 4, 2
# name: (ranks, extra top-level config)
ROWS = {
    "dp2": (2, {}),
    "tp2": (2, {"tensor_parallel": {"autotp_size": 2}}),
    "sp2": (2, {"sequence_parallel_size": 2}),
    "pp2-tp2": (4, {"pipeline": {"stages": 2}, "tensor_parallel": {"autotp_size": 2}}),
}
DEFAULT_ROWS = ["dp2", "tp2", "sp2"]
SIZE_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}


def limit(tool, key):
    out = subprocess.run([tool], capture_output=True, text=True, check=True).stdout
    return float(re.search(rf"^{key} ([0-9.]+)$", out, re.M).group(1)), out.splitlines()[0]


def write_config(folder, name, steps, dscore):
    ranks, extra = ROWS[name]
    data_parallel = ranks // (extra.get("pipeline", {}).get("stages", 1) *
                              extra.get("tensor_parallel", {}).get("autotp_size", 1) *
                              extra.get("sequence_parallel_size", 1))
    config = {"train_batch_size": MICRO * GAS * data_parallel, "train_micro_batch_size_per_gpu": MICRO,
              "train_steps": steps, "seed": 42, "steps_per_print": 1000000,
              "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
              "zero_optimization": {"stage": 0}, "model": LLAMA, "comms_logger": {"enabled": True},
              "data": {"type": "text", "path": os.path.join(ROOT, "configs/data/quickstart.txt")},
              "plugins": {"paths": [os.path.join(os.path.dirname(os.path.dirname(dscore)), "lib/dscore/plugins")]}}
    config.update(extra)
    path = os.path.join(folder, name + ".json")
    with open(path, "w") as f:
        json.dump(config, f, indent=1)
    return path, ranks, data_parallel


def parse_summary(text):
    """{op: [(message bytes, count, total latency ms)]} from the comms_logger table."""
    ops, op = {}, None
    for line in text.splitlines()[2:]:
        if line and not line.startswith(" "):
            op = line.strip()
            ops[op] = []
            continue
        m = re.match(r"\s+([0-9.]+) (B|KB|MB|GB)\s+(\d+)\s+([0-9.]+)", line)
        if m and op:
            ops[op].append((float(m.group(1)) * SIZE_UNITS[m.group(2)], int(m.group(3)), float(m.group(4))))
    return ops


def run_row(dscore, folder, name, steps, warmup):
    config, ranks, data_parallel = write_config(folder, name, steps, dscore)
    log = os.path.join(folder, name + ".log")
    with open(log, "w") as f:
        rc = subprocess.run([dscore, "run", "-n", str(ranks), "--config", config, "--log-format", "json",
                             "--trust-config-plugin-paths"], stdout=f, stderr=subprocess.STDOUT).returncode
    with open(log) as f:
        lines = f.read().splitlines()
    if rc != 0:
        sys.exit(f"parallel axes bench: FAILED: {name}: dscore run exited {rc}; log {log}:\n" +
                 "\n".join(lines[-20:]))
    progress, summary, params = [], None, None
    for line in lines:
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        message = r.get("message", "") if r.get("type") == "log" else ""
        if r.get("type") == "progress":
            progress.append(r)
        elif message.startswith("comms_logger summary"):
            summary = message
        elif params is None and re.match(r"training .*: (\d+) parameters", message):
            params = int(re.match(r"training .*: (\d+) parameters", message).group(1))
    if summary is None or len(progress) <= warmup:
        sys.exit(f"parallel axes bench: FAILED: {name}: no comms_logger summary or too few steps in {log}")
    t = [r["samples"] / r["samples_per_second"] for r in progress]
    tokens = (progress[-1]["samples"] - progress[warmup - 1]["samples"]) * LLAMA["block_size"]
    return {"tokens_per_s": tokens / (t[-1] - t[warmup - 1]), "ops": parse_summary(summary), "params": params,
            "losses": [r["loss"] for r in progress], "data_parallel": data_parallel}


def formula(name, params):
    """Rank 0's collective bytes per step (message sizes as the comms_logger counts them:
    the input tensor) for the traffic the axis adds, and its text."""
    L, C = LLAMA["num_hidden_layers"], LLAMA["hidden_size"]
    kv = C * LLAMA["num_key_value_heads"] // LLAMA["num_attention_heads"]
    BT = MICRO * LLAMA["block_size"]
    if name == "dp2":
        # dscore reduces every micro-batch at ZeRO 0-1 under accumulation (the order stages 2-3
        # need, for equal bits across stages: docs/deepspeed-differences.md); DeepSpeed once a step.
        return GAS * 4 * params, f"all_reduce: the {params} gradients, fp32, each of the gas {GAS} micro-batches"
    if name in ("tp2", "pp2-tp2"):
        layers = L if name == "tp2" else L // 2
        # Per micro-batch: two allreduces of B T C per block forward and two backward; the
        # embedding's output and the head's input gradient (on the stages that hold them).
        ends = 2 if name == "tp2" else 1
        return (GAS * (4 * layers + ends) * BT * C * 4,
                f"all_reduce: gas {GAS} x (4 L + {ends}) x B T C x 4 B, L = {layers} blocks on rank 0"
                " (plus the head's small statistics)")
    # Ulysses: per block and micro-batch q, k, v and the output each way, forward and backward.
    sp = ROWS[name][1]["sequence_parallel_size"]
    return (GAS * L * 2 * (2 * C + 2 * kv) * (BT // sp) * 4,
            f"all_to_all: gas {GAS} x L x 2 x (2 C + 2 C_kv) x (B T / {sp}) x 4 B (q, k, v, output; forward and backward)")


def axis_messages(name):
    """The op and message sizes of the traffic the row's axis adds (as the comms_logger prints
    sizes: to 2 decimals of their unit)."""
    if name == "dp2":  # the gradient buckets; the step statistics' messages are bytes to kilobytes
        return "all_reduce", lambda size: size >= 64 << 10
    if name == "sp2":
        return "all_to_all_single", lambda size: True
    activation = MICRO * LLAMA["block_size"] * LLAMA["hidden_size"] * 4  # B T C fp32
    return "all_reduce", lambda size: abs(size - activation) <= 0.01 * activation


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dscore", default=os.path.join(ROOT, "build/release/bin/dscore"))
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per row (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    ap.add_argument("--keep", action="store_true", help="keep the folder of configs and logs")
    args = ap.parse_args()
    dscore = os.path.realpath(args.dscore)
    tools = {t: os.path.join(os.path.dirname(dscore), t) for t in ("cpu_gemm_rate", "host_memory_rate")}
    for path in [dscore, *tools.values()]:
        if not os.access(path, os.X_OK):
            sys.exit(f"parallel axes bench: {path} is not built: cmake --build --preset release "
                     "--target dscore dscore_plugins cpu_gemm_rate host_memory_rate")
    rows = args.rows.split(",")
    for r in rows:
        if r not in ROWS:
            sys.exit(f"parallel axes bench: unknown row '{r}'; the rows are {', '.join(ROWS)}")
    if args.steps < 1 or args.warmup < 1:
        sys.exit("parallel axes bench: --steps and --warmup must be at least 1")
    folder = tempfile.mkdtemp(prefix="parallel_axes.")
    gemm_before, gemm_text = limit(tools["cpu_gemm_rate"], "fp32_gflops")
    memory_before, memory_text = limit(tools["host_memory_rate"], "host_memory_gbps")
    print(f"parallel axes bench: {os.cpu_count()} cores; {gemm_text}\n  {memory_text}")
    print(f"model: llama {LLAMA}; micro {MICRO} x gas {GAS} per data-parallel rank; ZeRO-0; "
          f"{args.warmup} warm-up + {args.steps} timed steps; configs and logs in {folder}")
    results = {}
    for name in rows:
        results[name] = r = run_row(dscore, folder, name, args.warmup + args.steps, args.warmup)
        print(f"  {name:<8} {r['tokens_per_s']:8.1f} tokens/s  loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}",
              flush=True)
    gemm_after, _ = limit(tools["cpu_gemm_rate"], "fp32_gflops")
    memory_after, _ = limit(tools["host_memory_rate"], "host_memory_gbps")
    memory = max(memory_before, memory_after) * 1e9
    print(f"\nlimits: fp32 GEMM {gemm_before:.1f} GFLOP/s before, {gemm_after:.1f} after; "
          f"host memory {memory_before:.1f} GB/s before, {memory_after:.1f} after")
    steps = args.warmup + args.steps
    base = results.get("dp2")
    print("\n| row | ranks | tokens/s | vs dp2 | collective bytes / step (rank 0) | the axis's: measured "
          "| formula | comm time / step | at the memory rate |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        per_step = {op: sum(size * count for size, count, _ in entries) / steps for op, entries in r["ops"].items()}
        comm_ms = sum(ms for entries in r["ops"].values() for _, _, ms in entries) / steps
        total = sum(per_step.values())
        expected, text = formula(name, r["params"])
        op, is_axis = axis_messages(name)
        measured = sum(s * c for s, c, _ in r["ops"].get(op, []) if is_axis(s)) / steps
        ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}" if base else "-"
        print(f"| {name} | {ROWS[name][0]} | {r['tokens_per_s']:.1f} | {ratio} | {total / 2**20:.1f} MiB | "
              f"{measured / 2**20:.1f} MiB | {expected / 2**20:.1f} MiB ({text}) | {comm_ms:.0f} ms | "
              f"{1e3 * total / memory:.1f} ms |")
    print("\nmeasured: the comms_logger's messages of the axis (dp2: all_reduce of 64 KiB or more; tp2: "
          "all_reduce of B T C fp32; sp2: every all_to_all_single); the total also counts the step's "
          "statistics and, where ZeRO's group is one rank (tp2), its in-place allreduce of the part's "
          "gradients, which moves nothing; comm time: the logger's latencies (blocking calls on one host: "
          "the copies and the waits for the other rank)")
    if args.keep:
        print(f"configs and logs kept in {folder}")
    else:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
