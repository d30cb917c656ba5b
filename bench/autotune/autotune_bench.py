#!/usr/bin/env python3
"""bench/autotune: `dscore autotune` on the quickstart GPT and the ~100M Llama
(issue 53), then its best config against every hand-written config in configs/
for that model, measured again in the same run, interleaved.

For each model the script
  1. writes a tuning config: the hand-written one with "zero_optimization":
     {"stage": "all"} and an "autotuning" section (below), in a scratch folder;
  2. runs `dscore autotune` on it and times it (the issue's limit: 10 minutes);
  3. runs the best config and each hand-written config ROUNDS times in turn
     (`dscore run --steps STEPS --log-format json`, checkpoints and monitors
     off), timing steps WARM+1..STEPS from the progress records, and prints
     each config's median samples/s, its model GFLOP/s and the share of the
     GEMM limit `cpu_gemm_rate` measured in the same run (the best of its
     measurements before and after the model's runs: a shared machine's
     rate moves by tens of percent).

usage: python3 bench/autotune/autotune_bench.py [--models gpt,llama] [--rounds 5]
       [--dscore build/release/bin/dscore]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# model: (hand-written configs, autotuning section, steps and warm-up of each re-measured run)
MODELS = {
    "gpt": (["configs/quickstart.json"],
            {"start_profile_step": 10, "end_profile_step": 60, "num_tuning_micro_batch_sizes": 3,
             "fast": True, "tuner_early_stopping": 12},
            60, 10),
    "llama": (["configs/llama_100m.json"],
              {"start_profile_step": 2, "end_profile_step": 4, "num_tuning_micro_batch_sizes": 3},
              6, 2),
}


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, **kw)


def gemm_limit(bin_dir):
    out = run([os.path.join(bin_dir, "cpu_gemm_rate")]).stdout
    rates = dict(line.split() for line in out.splitlines() if line.endswith(tuple("0123456789")) and
                 line.split()[0].endswith("_gflops"))
    return float(rates["fp32_gflops"]), float(rates["bf16_gflops"])


def measured_run(dscore, config, steps, warm, scratch):
    """samples/s of steps warm+1..steps of one `dscore run`."""
    with open(config) as f:
        doc = json.load(f)
    for key in ("checkpoint_dir", "save_interval"):
        doc.pop(key, None)
    for monitor in ("tensorboard", "csv_monitor", "wandb", "comet"):
        if isinstance(doc.get(monitor), dict):
            doc[monitor]["enabled"] = False
    path = os.path.join(scratch, "measure.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    r = run([dscore, "run", "--config", path, "--steps", str(steps), "--log-format", "json"])
    if r.returncode != 0:
        sys.exit(f"dscore run {config} failed:\n{r.stderr[-2000:]}")
    points = {}
    for line in r.stdout.splitlines():
        if '"type":"progress"' in line:
            p = json.loads(line)
            points[p["step"]] = p
    a, b = points[warm], points[steps]
    return (b["samples"] - a["samples"]) / (b["elapsed_seconds"] - a["elapsed_seconds"])


def bench_model(name, dscore, limits, rounds, scratch):
    hand, tuning, steps, warm = MODELS[name]
    with open(os.path.join(ROOT, hand[0])) as f:
        doc = json.load(f)
    doc.setdefault("zero_optimization", {})["stage"] = "all"
    tuning = dict(tuning, results_dir=os.path.join(scratch, f"{name}_results"),
                  exps_dir=os.path.join(scratch, f"{name}_exps"))
    doc["autotuning"] = tuning
    tune_config = os.path.join(scratch, f"{name}_tune.json")
    with open(tune_config, "w") as f:
        json.dump(doc, f, indent=1)
    start = time.monotonic()
    r = run([dscore, "autotune", "--config", tune_config])
    seconds = time.monotonic() - start
    if r.returncode != 0:
        sys.exit(f"dscore autotune ({name}) failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    table = r.stdout[r.stdout.index("\ncandidate") + 1:]
    print(f"## {name}: dscore autotune took {seconds:.0f} s (limit 600 s)\n")
    print("```\n" + table.rstrip() + "\n```\n")
    with open(os.path.join(tuning["results_dir"], "results.json")) as f:
        results = json.load(f)
    flops = results["model_flops_per_sample"] or 0
    best = os.path.join(tuning["results_dir"], "best_config.json")
    configs = [("best (" + results["best"] + ")", best)] + [(h, os.path.join(ROOT, h)) for h in hand]
    rates = {label: [] for label, _ in configs}
    for _ in range(rounds):
        for label, path in configs:
            rates[label].append(measured_run(dscore, path, steps, warm, scratch))
    with open(best) as f:
        bf16 = json.load(f).get("bf16", {}).get("enabled", False)
    after = gemm_limit(os.path.dirname(dscore))
    limit = max(limits[1], after[1]) if bf16 else max(limits[0], after[0])
    print(f"Re-measured, {rounds} rounds interleaved, steps {warm + 1}-{steps} of each run; "
          f"limit: {'bf16' if bf16 else 'fp32'} GEMM {limit:.1f} GFLOP/s (cpu_gemm_rate, the best of "
          f"before and after)\n")
    print("| config | samples/s (median) | runs | model GFLOP/s | of limit | vs best |")
    print("|---|---|---|---|---|---|")
    best_rate = statistics.median(rates[configs[0][0]])
    for label, _ in configs:
        m = statistics.median(rates[label])
        gflops = m * flops / 1e9
        runs = " ".join(f"{x:.1f}" for x in rates[label])
        print(f"| {label} | {m:.1f} | {runs} | {gflops:.1f} | {100 * gflops / limit:.0f}% | "
              f"{m / best_rate:.3f} |")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt,llama")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dscore", default=os.path.join(ROOT, "build/release/bin/dscore"))
    args = ap.parse_args()
    dscore = os.path.abspath(args.dscore)
    limits = gemm_limit(os.path.dirname(dscore))
    print(f"GEMM limit measured now: fp32 {limits[0]:.1f} GFLOP/s, bf16 {limits[1]:.1f} GFLOP/s\n")
    scratch = tempfile.mkdtemp(prefix="dscore_autotune_bench_")
    try:
        for name in args.models.split(","):
            bench_model(name, dscore, limits, args.rounds, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
