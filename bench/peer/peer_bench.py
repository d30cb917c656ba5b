"""dscore against PyTorch + DeepSpeed: the same model, config and machine, in one run.

--model gpt (default): the GPT of bench/gpt_train.cc, built by hand on both
sides from the same hyperparameters. --model llama: fine-tuning a ~100M
Llama-shaped model (12 layers, hidden 768, 12 heads, 4 key/value heads,
SwiGLU 2048, vocab 32000, tied embeddings): transformers creates it with
random weights and saves it with save_pretrained into the run's folder, and
both sides start from that folder ("from_pretrained").

Started by run.sh with the venv's python and DS_ACCELERATOR=cpu. For each row it
writes one ds_config.json into a temporary folder, runs `dscore run -n N
--config <it> --log-format json` and `torchrun --nproc_per_node N ds_train.py
--config <it>` one after the other (alternating which goes first), and prints
tokens/s of both, their ratio, and the achieved FLOP/s of each beside the
machine's best fp32 GEMM rate (torch.mm and dscore's cpu_gemm_rate, n x n,
all cores) measured before and after the rows. Both sides time the steps after the same warm-up.
"""
import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# The GPT of bench/gpt_train.cc.
GPT = {"type": "gpt", "n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "vocab_size": 256}
# --size: GPTs of about 10M (the bench GPT), 100M, 350M and 1B parameters (byte vocabulary, T 256),
# each with the micro batch per rank that keeps one rank's activations near a GiB, and the lr
# GPT-3's table gives its size (without warm-up, a larger one makes the wide models' loss jump).
GPT_SIZES = {"10m": ({}, 8, 6e-4), "100m": ({"n_layer": 14, "n_head": 12, "n_embd": 768}, 8, 6e-4),
             "350m": ({"n_layer": 28, "n_head": 16, "n_embd": 1024}, 4, 3e-4),
             "1b": ({"n_layer": 20, "n_head": 16, "n_embd": 2048}, 2, 2e-4)}
# The Llama of --model llama, as transformers' LlamaConfig (about 100M parameters).
LLAMA = {"vocab_size": 32000, "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12,
         "num_attention_heads": 12, "num_key_value_heads": 4, "max_position_embeddings": 1024,
         "rope_theta": 10000.0, "tie_word_embeddings": True}
LLAMA_T = 256
MODEL = dict(GPT)  # the model of this run (main() sets it)
MICRO, LR = 8, 6e-4
# name: (ranks, ZeRO stage, bf16)
ROWS = {"z0-1": (1, 0, False), "z0-2": (2, 0, False), "z3-2": (2, 3, False),
        "bf16-z0-1": (1, 0, True), "bf16-z3-2": (2, 3, True)}
# Asked for by name only: the pipeline rows (docs/pipeline.md), 8 micro-batches a step on both:
# "dp2-m8" 2 data-parallel ranks (gas 4), "pp2-m8" 2 pipeline stages on 2 ranks (gas 8), the same
# batch; DeepSpeed's side is its PipelineModule (ds_train.py). dscore prints each stage's share of
# the schedule spent computing beside its schedule's bubble. "pp2i-m8" is "pp2-m8" with dscore's
# interleaved schedule (2 chunks a stage; DeepSpeed has none: its side runs its 1F1B again).
PIPE_MICRO_BATCHES = 8
PIPE_ROWS = {"dp2-m8": (2, 0, False), "pp2-m8": (2, 0, False), "pp2i-m8": (2, 0, False)}
PIPE_STAGES = {"dp2-m8": 1, "pp2-m8": 2, "pp2i-m8": 2}
INTERLEAVED_ROWS = {"pp2i-m8": 2}  # virtual stages
# Asked for by name only: ZeRO-Offload ("offload_optimizer": {"device": "cpu"}) on both sides
# (DeepSpeed: DeepSpeedCPUAdam on the host copy; dscore: core/owned_state/host_offload_state.h).
OFFLOAD_ROWS = {"z2-2-offload": (2, 2, False), "bf16-z2-2-offload": (2, 2, True)}
# Asked for by name only: ZeRO-2 at 2 ranks, for the peak-memory comparison (issue 46).
ZERO2_ROWS = {"z2-2": (2, 2, False), "bf16-z2-2": (2, 2, True)}
ALL_ROWS = {**ROWS, **ZERO2_ROWS, **OFFLOAD_ROWS, **PIPE_ROWS}
# Each side runs under `/usr/bin/time -v`: its "Maximum resident set size" is the largest
# process of the tree (getrusage's children figure), the busiest rank's peak RSS on both sides.
TIME_V = "/usr/bin/time"


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def gemm_rate(n, dtype, repeat=4):
    """Best FLOP/s of torch.mm on n x n matrices, all cores."""
    torch.set_num_threads(os.cpu_count())
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t))
    return best


def dscore_gemm_rate(dscore, n):
    """dscore's own limits (bench/cpu_gemm_rate: the best fp32 GEMM of its
    build on all cores, and its bf16 GEMM where it has one), from the binary
    beside dscore, as (fp32, bf16) FLOP/s; zeros if not built."""
    tool = os.path.join(os.path.dirname(dscore), "cpu_gemm_rate")
    if not os.access(tool, os.X_OK):
        print(f"peer bench: {tool} not built (cmake --build --preset release --target cpu_gemm_rate): "
              "the limit is torch.mm's alone")
        return 0.0, 0.0
    out = subprocess.run([tool, "--n", str(n)], capture_output=True, text=True, check=True).stdout
    bf16 = re.search(r"^bf16_gflops ([0-9.]+)$", out, re.M)
    return float(out.split("fp32_gflops")[-1]) * 1e9, float(bf16.group(1)) * 1e9 if bf16 else 0.0


def write_config(folder, name, ranks, stage, bf16, steps, dscore, offload=False):
    stages = PIPE_STAGES.get(name, 1)
    gas = PIPE_MICRO_BATCHES * stages // ranks if name in PIPE_ROWS else 1
    config = {
        "train_batch_size": MICRO * gas * ranks // stages, "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": gas, "steps_per_print": 1000000, "train_steps": steps, "seed": 42,
        "optimizer": {"type": "AdamW", "params": {"lr": LR}},
        "zero_optimization": {"stage": stage},
        "model": MODEL,
        "data": {"type": "text", "path": os.path.join(ROOT, "configs/data/quickstart.txt")},
    }
    # A build tree's plugins (dscore also looks beside itself and in DSCORE_PLUGIN_PATH).
    plugins = os.path.join(os.path.dirname(os.path.dirname(dscore)), "lib/dscore/plugins")
    if os.path.isdir(plugins):
        config["plugins"] = {"paths": [plugins]}
    if bf16:
        config["bf16"] = {"enabled": True}
    if offload:
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if stages > 1:
        config["pipeline"] = {"stages": stages}
        if name in INTERLEAVED_ROWS:  # dscore reads it; DeepSpeed ignores the two keys
            config["pipeline"].update(schedule="interleaved", virtual_stages=INTERLEAVED_ROWS[name])
    path = os.path.join(folder, f"{name}.json")
    with open(path, "w") as f:
        json.dump(config, f, indent=1)
    return path


def run_logged(cmd, env, log_path, what, done_marker=None):
    """The command's output, run under `/usr/bin/time -v` where it is there;
    a failed exit ends the bench, unless the output already holds
    done_marker (a result printed before a crash at teardown, which torch +
    DeepSpeed's CPU runs sometimes have): then a warning."""
    if os.access(TIME_V, os.X_OK):
        cmd = [TIME_V, "-v"] + cmd
    with open(log_path, "w") as log:
        rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=os.path.dirname(log_path)).returncode
    if rc != 0 and done_marker is not None:
        with open(log_path) as f:
            out = f.read()
        if done_marker in out:
            print(f"  warning: {what} exited {rc} after printing its result (log {log_path}); the result is kept")
            return out
    if rc != 0:
        with open(log_path) as f:
            tail = f.read()[-4000:]
        sys.exit(f"peer bench: FAILED: {what} exited {rc} (log {log_path}):\n{tail}")
    with open(log_path) as f:
        return f.read()


def peak_rss_bytes(out):
    """The largest process's peak RSS from `/usr/bin/time -v`'s report; None without one."""
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out)
    return int(m.group(1)) * 1024 if m else None


def planned_peak_bytes(dscore, config, ranks):
    """`dscore plan`'s largest per-rank "total (peak)" for this config (its
    plugins.paths trusted as `dscore run --trust-config-plugin-paths` does)."""
    env = dict(os.environ, DSCORE_TRUST_CONFIG_PLUGIN_PATHS="1")
    run = subprocess.run([dscore, "plan", "--config", config, "-n", str(ranks)], capture_output=True, text=True,
                         env=env)
    out = run.stdout
    if run.returncode != 0:
        sys.exit(f"peer bench: FAILED: dscore plan --config {config} -n {ranks} exited {run.returncode}:\n"
                 f"{run.stderr[-2000:]}")
    m = re.search(r"^\s*total \(peak\)\s+(.*)$", out, re.M)
    if not m:
        sys.exit(f"peer bench: FAILED: no 'total (peak)' line in dscore plan's output for {config}:\n{out}")
    units = {"B": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}
    cells = re.findall(r"([0-9.]+) (B|KiB|MiB|GiB|TiB)", m.group(1))
    return max(float(v) * units[u] for v, u in cells)


def run_dscore(dscore, config, ranks, warmup, env, folder, name):
    out = run_logged([dscore, "run", "-n", str(ranks), "--config", config, "--log-format", "json",
                      "--trust-config-plugin-paths"], env,
                     os.path.join(folder, f"{name}.dscore.log"), f"dscore run ({name})")
    records, params, stage_timing = [], None, []
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("type") == "progress":
            records.append(r)
        elif r.get("type") == "log" and params is None:
            m = re.search(r"^training .*: (\d+) parameters", r.get("message", ""))
            params = int(m.group(1)) if m else None
        if r.get("type") == "log" and r.get("message", "").startswith("pipeline stage timing:"):
            stage_timing.append((r.get("rank"), r["message"][len("pipeline stage timing: "):]))
    if params is None or len(records) <= warmup:
        sys.exit(f"peer bench: FAILED: no parameter count or too few progress records in {folder}/{name}.dscore.log")
    # Each record's rate is samples so far over the seconds since training
    # began, so samples / rate is its time: the timed window is the steps after warm-up.
    t = [r["samples"] / r["samples_per_second"] for r in records]
    tokens = (records[-1]["samples"] - records[warmup - 1]["samples"]) * MODEL["block_size"]
    return {"tokens_per_s": tokens / (t[-1] - t[warmup - 1]), "params": params, "losses": [r["loss"] for r in records],
            "stage_timing": sorted(stage_timing), "peak_rss": peak_rss_bytes(out)}


def run_peer(venv_bin, config, ranks, warmup, env, folder, name):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = run_logged([os.path.join(venv_bin, "torchrun"), "--nproc_per_node", str(ranks), "--master_addr",
                      "127.0.0.1", "--master_port", str(port), os.path.join(HERE, "ds_train.py"), "--config", config,
                      "--warmup", str(warmup)], env, os.path.join(folder, f"{name}.peer.log"), f"ds_train.py ({name})",
                     done_marker="peer_result ")
    for line in out.splitlines():
        if line.startswith("peer_result "):
            return dict(json.loads(line[len("peer_result "):]), peak_rss=peak_rss_bytes(out))
    sys.exit(f"peer bench: FAILED: no peer_result line in {folder}/{name}.peer.log")


def flops_per_token(params):
    """6N + 12 L C T, N the parameters a token multiplies: without gpt's
    position embedding (as bench/gpt_train.cc), without an untied input
    embedding (a lookup)."""
    T = MODEL["block_size"]
    if MODEL["type"] == "gpt":
        L, C = MODEL["n_layer"], MODEL["n_embd"]
        return 6.0 * (params - T * C) + 12.0 * L * C * T
    L, C = LLAMA["num_hidden_layers"], LLAMA["hidden_size"]
    lookup = 0 if LLAMA["tie_word_embeddings"] else LLAMA["vocab_size"] * C
    return 6.0 * (params - lookup) + 12.0 * L * C * T


def vocab_size():
    return MODEL["vocab_size"] if MODEL["type"] == "gpt" else LLAMA["vocab_size"]


def make_llama_folder(folder):
    """The --model llama starting point: random weights (seed 0) saved as a
    Hugging Face folder, as a user's downloaded checkpoint would be."""
    from transformers import LlamaConfig, LlamaForCausalLM
    path = os.path.join(folder, "llama-100m")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**LLAMA)).save_pretrained(path)
    return path


def check_losses(name, side, losses, must_fall=True):
    """Both sides must start near ln(vocab) and fall: else the models differ.
    must_fall False (the larger --size GPTs, whose few steps at a small lr
    may not drop the loss by 0.5): a warning instead."""
    ln_vocab = math.log(vocab_size())
    if abs(losses[0] - ln_vocab) > 0.5:
        sys.exit(f"peer bench: FAILED: {name}: {side}'s first loss {losses[0]:.3f} is not near "
                 f"ln({vocab_size()}) = {ln_vocab:.3f}")
    if not min(losses[-2:]) < losses[0] - 0.5:
        if must_fall:
            sys.exit(f"peer bench: FAILED: {name}: {side}'s loss does not fall: {losses}")
        print(f"peer bench: warning: {name}: {side}'s loss falls by less than 0.5: {losses}")


def main():
    global MODEL, MICRO, LR
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dscore", default=os.path.join(ROOT, "build/release/bin/dscore"))
    ap.add_argument("--model", choices=["gpt", "llama"], default="gpt",
                    help="gpt: bench/gpt_train.cc's GPT; llama: fine-tune a ~100M Llama from a Hugging Face folder")
    ap.add_argument("--size", choices=list(GPT_SIZES), default="10m",
                    help="--model gpt's size: 10m (the bench GPT, default), 100m (14 x 768), 350m (28 x 1024), "
                    "1b (20 x 2048); micro batch 8, 8, 4, 2; lr 6e-4, 6e-4, 3e-4, 2e-4")
    ap.add_argument("--micro-batch", type=int, help=f"micro batch per rank (default {MICRO}; 4 for --model llama)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per run (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    ap.add_argument("--rows", help=f"comma-separated, of {', '.join(ALL_ROWS)} (default: all but the offload "
                    "rows; the bf16 rows only where the CPU has avx512_bf16 or amx_bf16)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per side and row, alternating; the best tokens/s counts (default 1)")
    ap.add_argument("--gemm-n", type=int, default=2048, help="square size of the torch.mm limit (default 2048)")
    ap.add_argument("--keep", action="store_true", help="keep the folder of configs and logs")
    args = ap.parse_args()
    dscore = os.path.realpath(args.dscore)
    if not os.access(dscore, os.X_OK):
        sys.exit(f"peer bench: {dscore} is not built: cmake --build --preset release --target dscore dscore_plugins")
    if args.steps < 1 or args.warmup < 1 or args.repeat < 1:
        sys.exit("peer bench: --steps, --warmup and --repeat must be at least 1 (the first step allocates and JIT-loads: it is never timed)")
    cores, flags = os.cpu_count(), cpu_flags()
    bf16_isa = sorted(flags & {"avx512_bf16", "amx_bf16"})
    if args.rows:
        rows = args.rows.split(",")
        for r in rows:
            if r not in ALL_ROWS:
                sys.exit(f"peer bench: unknown row '{r}'; the rows are {', '.join(ALL_ROWS)}")
    else:
        # Without bf16 instructions torch's bf16 matmuls take a slow path
        # (about 15x slower than fp32 on an AVX2 host): a bf16 row then
        # measures that path and takes minutes. Ask for them by name.
        rows = [r for r in ROWS if bf16_isa or not ROWS[r][2]]
        if len(rows) < len(ROWS):
            print("peer bench: bf16 rows left out: this CPU has no avx512_bf16/amx_bf16 "
                  "(--rows bf16-z0-1,bf16-z3-2 runs them anyway)")
    folder = tempfile.mkdtemp(prefix="peer_bench.")
    if args.model == "llama":
        MODEL = {"type": "llama", "from_pretrained": make_llama_folder(folder), "block_size": LLAMA_T}
        MICRO = 4
    else:
        MODEL = dict(GPT, **GPT_SIZES[args.size][0])
        MICRO, LR = GPT_SIZES[args.size][1:]
    if args.micro_batch:
        MICRO = args.micro_batch
    venv_bin = os.path.dirname(sys.executable)
    print(f"peer bench: {cores} cores, CPU bf16 instructions: {', '.join(bf16_isa) or 'none (AVX2 only)'}; "
          f"torch {torch.__version__}; configs and logs in {folder}")
    shape = (f"gpt {MODEL['n_layer']} layers, n_embd {MODEL['n_embd']}, {MODEL['n_head']} heads, vocab "
             f"{MODEL['vocab_size']}" if args.model == "gpt" else
             "llama " + ", ".join(f"{k} {v}" for k, v in LLAMA.items()) + f" (from {MODEL['from_pretrained']})")
    print(f"model: {shape}; T {MODEL['block_size']}; micro batch {MICRO}, AdamW lr {LR}; "
          f"{args.warmup} warm-up + {args.steps} timed steps per run, {args.repeat} run(s) per side and row")
    gemm = {"fp32 before": gemm_rate(args.gemm_n, torch.float32)}
    gemm["dscore before"], gemm["dscore bf16 before"] = dscore_gemm_rate(dscore, args.gemm_n)
    if bf16_isa:
        gemm["bf16 before"] = gemm_rate(args.gemm_n, torch.bfloat16)

    results = []
    for i, name in enumerate(rows):
        ranks, stage, bf16 = ALL_ROWS[name]
        config = write_config(folder, name, ranks, stage, bf16, args.warmup + args.steps, dscore,
                              offload=name in OFFLOAD_ROWS)
        planned_peak = planned_peak_bytes(dscore, config, ranks)
        threads = max(1, cores // ranks)
        # The same environment for both sides; torchrun would set OMP_NUM_THREADS=1 itself.
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        sides = [("dscore", lambda: run_dscore(dscore, config, ranks, args.warmup, env, folder, name)),
                 ("peer", lambda: run_peer(venv_bin, config, ranks, args.warmup, env, folder, name))]
        got = {}
        for k in range(args.repeat):  # the best tokens/s of each side; the losses and peak RSS of its first run
            for side, run in (sides if (i + k) % 2 == 0 else sides[::-1]):
                r = run()
                print(f"  {name:<10} {side:<6} {r['tokens_per_s']:8.0f} tokens/s  "
                      f"loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}", flush=True)
                if side not in got:
                    got[side] = r
                got[side]["tokens_per_s"] = max(got[side]["tokens_per_s"], r["tokens_per_s"])
        d, p = got["dscore"], got["peer"]
        if d["params"] != p["params"]:
            sys.exit(f"peer bench: FAILED: {name}: dscore has {d['params']} parameters, the peer {p['params']}: "
                     "the models differ")
        check_losses(name, "dscore", d["losses"], must_fall=args.size == "10m")
        check_losses(name, "peer", p["losses"], must_fall=args.size == "10m")
        d["planned_peak"] = planned_peak
        results.append((name, ranks, stage, bf16, threads, d, p))

    gemm["fp32 after"] = gemm_rate(args.gemm_n, torch.float32)
    gemm["dscore after"], gemm["dscore bf16 after"] = dscore_gemm_rate(dscore, args.gemm_n)
    if bf16_isa:
        gemm["bf16 after"] = gemm_rate(args.gemm_n, torch.bfloat16)
    # The limit: the machine's best fp32 GEMM, torch's (MKL/oneDNN) or dscore's build's (OpenBLAS).
    sgemm = max(gemm["fp32 before"], gemm["fp32 after"], gemm["dscore before"], gemm["dscore after"])
    # The bf16 limit: torch's bf16 GEMM or dscore's (oneDNN, where its build has it).
    bgemm = max(gemm["bf16 before"], gemm["bf16 after"], gemm["dscore bf16 before"],
                gemm["dscore bf16 after"]) if bf16_isa else None

    params = results[0][5]["params"] if results else 0
    fpt = flops_per_token(params)
    print()
    print(f"parameters: {params} on both sides; FLOPs per token {fpt:.3g} (6N + 12 L C T, N without "
          f"{'wpe' if MODEL['type'] == 'gpt' else 'an untied input embedding'})")
    print("torch sgemm GFLOP/s (torch.mm n={}, {} threads, best of 4): {:.1f} before, {:.1f} after".format(
        args.gemm_n, cores, gemm["fp32 before"] / 1e9, gemm["fp32 after"] / 1e9))
    print("dscore cpu_gemm_rate GFLOP/s (n={}, all cores): {:.1f} before, {:.1f} after; the limit is the best: {:.1f}".format(
        args.gemm_n, gemm["dscore before"] / 1e9, gemm["dscore after"] / 1e9, sgemm / 1e9))
    if bf16_isa:
        print("torch bf16 gemm GFLOP/s: {:.1f} before, {:.1f} after; dscore's: {:.1f} before, {:.1f} after "
              "(0: none in its build); the bf16 limit is the best: {:.1f}".format(
                  gemm["bf16 before"] / 1e9, gemm["bf16 after"] / 1e9, gemm["dscore bf16 before"] / 1e9,
                  gemm["dscore bf16 after"] / 1e9, bgemm / 1e9))
    else:
        print("torch bf16 gemm: not measured (no avx512_bf16/amx_bf16: bf16 rows are read against the fp32 limit)")
    print("threads per rank, both sides: OMP_NUM_THREADS = cores / ranks (dscore reads it as PyTorch does)")
    print()
    hdr = "| row | ranks | ZeRO | dtype | peer threads/rank | dscore tokens/s | peer tokens/s | dscore / peer " \
          "| dscore GFLOP/s (% of limit) | peer GFLOP/s (% of limit) | loss dscore | loss peer |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for name, ranks, stage, bf16, threads, d, p in results:
        limit = bgemm if (bf16 and bgemm) else sgemm
        cells = [name + (f" ({PIPE_STAGES[name]} stage(s))" if name in PIPE_ROWS else ""), str(ranks),
                 f"{stage}{' + offload' if name in OFFLOAD_ROWS else ''}",
                 "bf16" if bf16 else "fp32", str(threads),
                 f"{d['tokens_per_s']:.0f}", f"{p['tokens_per_s']:.0f}", f"{d['tokens_per_s'] / p['tokens_per_s']:.2f}"]
        for side in (d, p):
            achieved = side["tokens_per_s"] * fpt
            cells.append(f"{achieved / 1e9:.1f} ({100 * achieved / limit:.0f}%)")
        for side in (d, p):
            cells.append(f"{side['losses'][0]:.2f} -> {side['losses'][-1]:.2f}")
        print("| " + " | ".join(cells) + " |")
    print()
    mib = 2 ** 20
    print("Peak RSS of the largest process on each side (`/usr/bin/time -v`, the first run of each), and "
          "`dscore plan`'s largest per-rank total:")
    print("| row | dscore peak RSS MiB | peer peak RSS MiB | dscore / peer | dscore plan MiB | plan / dscore peak |")
    print("|---|---|---|---|---|---|")
    for name, ranks, stage, bf16, threads, d, p in results:
        if d["peak_rss"] and p["peak_rss"]:
            print(f"| {name} | {d['peak_rss'] / mib:.0f} | {p['peak_rss'] / mib:.0f} | "
                  f"{d['peak_rss'] / p['peak_rss']:.2f} | {d['planned_peak'] / mib:.0f} | "
                  f"{d['planned_peak'] / d['peak_rss']:.3f} |")
        else:
            print(f"| {name} | no /usr/bin/time report ({TIME_V}: Debian's `time` package) | | | "
                  f"{d['planned_peak'] / mib:.0f} | |")
    for name, ranks, stage, bf16, threads, d, p in results:
        for rank, timing in d.get("stage_timing", []):
            print(f"{name} dscore rank {rank}: {timing}")
    print()
    for name, ranks, stage, bf16, threads, d, p in results:  # machine-readable
        print("peer_bench_row " + json.dumps({
            "row": name, "model": MODEL["type"], "size": args.size if MODEL["type"] == "gpt" else None, "ranks": ranks, "zero_stage": stage, "bf16": bf16, "offload": name in OFFLOAD_ROWS,
            "params": params,
            "dscore_tokens_per_s": round(d["tokens_per_s"], 1), "peer_tokens_per_s": round(p["tokens_per_s"], 1),
            "flops_per_token": fpt, "gemm_limit_flops": round(sgemm), "torch_bf16_gemm_flops": bgemm and round(bgemm),
            "dscore_peak_rss": d["peak_rss"], "peer_peak_rss": p["peak_rss"], "dscore_planned_peak": d["planned_peak"],
            "dscore_losses": d["losses"], "peer_losses": p["losses"]}))
    if args.keep:
        print(f"\nconfigs and logs kept in {folder}")
    else:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
