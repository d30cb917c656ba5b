#!/usr/bin/env python3
"""torch.optim.AdamW(fused=True) on the tensors bench/gpu/fused_adam times.

The comparison for dscore's FusedAdam: the same parameter tensors (GPT-2
124M's 148, or one flat tensor with --params), fp32 parameters and
gradients (torch's fused AdamW takes gradients in the parameters' dtype, so
--grad bf16 is accepted and still runs fp32 gradients: 28 bytes per
parameter either way), the same number of steps and rounds, timed with CUDA
events; and a device copy of as many bytes as Adam moves, so the figure also
reads as a fraction of the GPU.

Prints a line "torch_fused_adamw: step_ms=<best> ..." that fused_adam --torch
reads. Exits 0 with a message where torch has no CUDA device.

  python3 bench/gpu/torch_fused_adamw.py [--params N] [--grad fp32|bf16] [--steps 20] [--rounds 3]
"""
import argparse
import sys


def gpt2_124m_sizes():
    c, v, t = 768, 50257, 1024
    sizes = [v * c, t * c]
    for _ in range(12):
        sizes += [c, c, c * 3 * c, 3 * c, c * c, c, c, c, c * 4 * c, 4 * c, 4 * c * c, c]
    return sizes + [c, c]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=0, help="one flat tensor of N (default: GPT-2 124M)")
    ap.add_argument("--grad", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_fused_adamw: torch is not installed; nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("torch_fused_adamw: no CUDA device; nothing measured")
        return 0
    dev = torch.device("cuda")
    sizes = [a.params] if a.params > 0 else gpt2_124m_sizes()
    n = sum(sizes)
    params = [torch.full((s,), 0.0115, device=dev, requires_grad=True) for s in sizes]
    for p in params:
        p.grad = torch.full_like(p, 0.0115)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=True)
    copy_bytes = 14 * n  # read 14n, write 14n: Adam's 28 bytes per parameter
    src = torch.empty(copy_bytes, dtype=torch.uint8, device=dev).fill_(0x11)
    dst = torch.empty_like(src)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn):
        start.record()
        for _ in range(a.steps):
            fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / a.steps  # ms

    timed(opt.step)  # warm-up: state allocation, kernels loaded
    timed(lambda: dst.copy_(src))
    copy_ms, adam_ms = [], []
    for _ in range(a.rounds):
        copy_ms.append(timed(lambda: dst.copy_(src)))
        adam_ms.append(timed(opt.step))
    copy_gbs = 2 * copy_bytes / (min(copy_ms) / 1e3) / 1e9
    adam_gbs = 28 * n / (min(adam_ms) / 1e3) / 1e9
    print(f"torch_fused_adamw: torch {torch.__version__} on {torch.cuda.get_device_name()}: "
          f"{len(sizes)} tensor(s), {n} fp32 parameters, fp32 gradients; "
          f"best (worst) of {a.rounds} x {a.steps} steps")
    print(f"  device copy (tensor.copy_, {copy_bytes / 1e9:.2f} GB)   {min(copy_ms):8.3f} ms "
          f"({max(copy_ms):8.3f})   {copy_gbs:7.1f} GB/s (read + write)")
    print(f"  AdamW(fused=True) step           {min(adam_ms):8.3f} ms ({max(adam_ms):8.3f})   "
          f"{adam_gbs:7.1f} GB/s (28 B/parameter)   {100 * adam_gbs / copy_gbs:.1f}% of copy")
    print(f"torch_fused_adamw: step_ms={min(adam_ms):.4f} copy_gbs={copy_gbs:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
