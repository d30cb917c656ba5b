"""Generation speed of `dscore generate` against transformers' generate() on
the same machine in the same run, for the ~100M Llama (configs/
llama_100m.json's shape: 12 layers, hidden 768, 12 heads, 4 key/value
heads, vocab 32000, tied; random weights saved by transformers as a
Hugging Face folder, max_position_embeddings 2048, fp32), both on all cores.

Rows:
  - prefill: a 256-token prompt's forward (dscore: its first step, which
    also picks the first new token; transformers: model(prompt)), tokens/s;
  - decode with the KV cache at contexts 64, 256 and 1024 (the prompt's
    length; 32 new tokens): ms per token, which the cache keeps flat in the
    context; each beside the memory limit, the fp32 weights read once per
    token (4 B x parameters / the host memory rate);
  - decode without the cache (dscore --no-kv-cache, transformers
    use_cache=False) at context 64 (8 new tokens) and 256 (4).
Limits measured in the same run, before and after the rows: the fp32 GEMM
rate (bench/cpu_gemm_rate) and the host memory rate (bench/host_memory_rate).

With --zero-inference DIR, instead: ZeRO-Inference of the 2.5B bf16 GPT of
configs/nvme_offload_2b.json (its initial weights) with the weights on NVMe
under DIR (--offload-param nvme, none kept in memory): ms per decoded token
beside its floor, the bf16 weights (2 B x parameters) read once per token at
the disk's read rate, which `dscore io-bench DIR` measures in the same run
(its probe), and the peak RSS.

Usage: build/deepspeed-venv/bin/python bench/generate.py [--dscore build/release/bin/dscore]
                                                         [--zero-inference DIR]
Needs the release build (dscore, its plugins, cpu_gemm_rate, host_memory_rate) and the venv of
tests/external/deepspeed (torch, transformers).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPE = dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
             num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048,
             rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
TIMING = re.compile(r"prompt of (\d+) tokens and the first new one in ([0-9.]+) s .*?; (\d+) more "
                    r"in ([0-9.]+) s")


def limit(tool, key):
    out = subprocess.run([tool], capture_output=True, text=True, check=True).stdout
    return float(re.search(rf"^{key} ([0-9.]+)$", out, re.M).group(1))


def prompt_of(n):
    return [(7 * i + 3) % 32000 for i in range(n)]


def dscore_run(dscore, folder, n, new, cache):
    args = [dscore, "generate", "--hf", folder, "--prompt-tokens", ",".join(map(str, prompt_of(n))),
            "--max-new-tokens", str(new), "--temperature", "0"]
    if not cache:
        args.append("--no-kv-cache")
    r = subprocess.run(args, capture_output=True, text=True)
    m = TIMING.search(r.stderr)
    if r.returncode != 0 or not m:
        sys.exit("dscore generate failed:\n" + r.stderr)
    prompt, first, more, rest = int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))
    tokens = [int(t) for t in r.stdout.strip().split(",")][n:]
    return prompt / first, 1e3 * rest / more, tokens


def torch_run(model, n, new, cache):
    ids = torch.tensor([prompt_of(n)])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        start = time.perf_counter()
        model(ids)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                             use_cache=cache)
        total = time.perf_counter() - start
    return n / prefill, 1e3 * (total - prefill) / (new - 1), out[0, n:].tolist()


def zero_inference(dscore, folder):
    probe = subprocess.run([dscore, "io-bench", folder], capture_output=True, text=True, check=True)
    read = max(float(x) for x in re.findall(r"read ([0-9.]+) GB/s", probe.stdout + probe.stderr))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config = os.path.join(repo, "configs", "nvme_offload_2b.json")
    start = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "peak_rss_kb %M", dscore, "generate", "--config",
                        config, "--prompt-tokens", "84,104,101,32", "--temperature", "0",
                        "--max-new-tokens", "6", "--offload-param", "nvme", "--nvme-path", folder],
                       capture_output=True, text=True, cwd=repo)
    wall = time.perf_counter() - start
    m = TIMING.search(r.stderr)
    if r.returncode != 0 or not m:
        sys.exit("dscore generate failed:\n" + r.stderr)
    rss = int(re.search(r"peak_rss_kb (\d+)", r.stderr).group(1)) / 2**20
    ms = 1e3 * float(m.group(4)) / int(m.group(3))
    params = 32 * 12 * 2560 * 2560 + 2560 * (256 + 64)  # blocks' matrices + embeddings (bf16)
    floor = 1e3 * 2 * params / (read * 1e9)
    print(f"ZeRO-Inference, 2.5B bf16 GPT (configs/nvme_offload_2b.json), weights on NVMe at {folder}")
    print(f"limit: the disk's read rate {read:.2f} GB/s (dscore io-bench, best of its points and "
          f"probe): {floor:.0f} ms to read the {2 * params / 1e9:.2f} GB of weights")
    print(f"decode: {ms:.0f} ms/token = {ms / floor:.2f} x that floor; first step (start of the "
          f"cache, the prompt) {float(m.group(2)):.1f} s; peak RSS {rss:.2f} GiB; wall {wall:.0f} s "
          f"(the engine's start writes the weights and an fp32 master to the folder)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dscore", default="build/release/bin/dscore")
    parser.add_argument("--zero-inference", metavar="DIR")
    args = parser.parse_args()
    dscore = os.path.abspath(args.dscore)
    if args.zero_inference:
        return zero_inference(dscore, os.path.abspath(args.zero_inference))
    tools = {t: os.path.join(os.path.dirname(dscore), t) for t in ("cpu_gemm_rate", "host_memory_rate")}
    gemm_before = limit(tools["cpu_gemm_rate"], "fp32_gflops")
    memory_before = limit(tools["host_memory_rate"], "host_memory_gbps")
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count())
    model = LlamaForCausalLM(LlamaConfig(**SHAPE)).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    params = sum(p.numel() for p in model.parameters())
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        for name, n, new, cache in [("decode, KV cache", 64, 32, True),
                                    ("decode, KV cache", 256, 32, True),
                                    ("decode, KV cache", 1024, 32, True),
                                    ("decode, no KV cache", 64, 8, False),
                                    ("decode, no KV cache", 256, 4, False)]:
            ours = dscore_run(dscore, folder, n, new, cache)
            theirs = torch_run(model, n, new, cache)
            rows.append((name, n, new, ours, theirs))
    gemm_after = limit(tools["cpu_gemm_rate"], "fp32_gflops")
    memory_after = limit(tools["host_memory_rate"], "host_memory_gbps")
    memory = max(memory_before, memory_after)
    floor_ms = 1e3 * 4 * params / (memory * 1e9)
    print(f"~100M Llama ({params / 1e6:.1f}M parameters, fp32), greedy, {os.cpu_count()} cores; "
          f"torch {torch.__version__}")
    print(f"limits: fp32 GEMM {gemm_before:.1f} / {gemm_after:.1f} GFLOP/s (before / after), host "
          f"memory {memory_before:.1f} / {memory_after:.1f} GB/s: reading the weights once takes "
          f"{floor_ms:.1f} ms (a cached decode step's floor)")
    n_prefill = rows[1]
    print(f"prefill, {n_prefill[1]} tokens: dscore {n_prefill[3][0]:.0f} tokens/s "
          f"({2 * params * n_prefill[3][0] / 1e9:.1f} GFLOP/s), transformers "
          f"{n_prefill[4][0]:.0f} tokens/s")
    print("| row | context | new | dscore ms/token | transformers ms/token | dscore / floor | "
          "same tokens |")
    print("|---|---|---|---|---|---|---|")
    for name, n, new, ours, theirs in rows:
        print(f"| {name} | {n} | {new} | {ours[1]:.1f} | {theirs[1]:.1f} | "
              f"{ours[1] / floor_ms:.2f} | {ours[2] == theirs[2]} |")


if __name__ == "__main__":
    main()
