"""dscore's llama model against transformers' LlamaForCausalLM.

Tiny random Llamas (2 layers, hidden 64, 4 query heads over 2 key/value
heads, intermediate 176, vocab 300, rope_theta 10000), tied and untied, and
one with Llama 3 rope_scaling. dscore initialises each (seeded) and
`dscore zero-to-fp32` exports the weights; transformers loads that state_dict
with strict=True (so the names and layouts are transformers' own), then:
  - the loss of a fixed batch (two chunks of a token shard) equals torch's;
  - the gradient of every parameter, read from one SGD step (lr 1, no
    momentum, no weight decay: w1 = w0 - g) exported again, equals torch
    autograd's;
  - greedy generation from a prompt equals argmax decoding in torch (the
    logits' order).
The untied and tied models again split over 2 ranks (tensor_parallel
autotp_size 2: each rank one key/value head and its two query heads, half
the MLP, half the vocabulary with the vocab-parallel cross-entropy), over
2 sequence-parallel ranks (sequence_parallel_size 2: each rank half the
positions, attention over all of them for one key/value head and its query
heads through the all-to-alls), and in 2 pipeline stages of 2
tensor-parallel ranks each (4 ranks): the same loss, gradients (read from
the split run's checkpoint, which holds whole tensors) and greedy tokens
(its checkpoint generated from at one rank).
Tolerances (fp32 on both sides, different summation orders): loss within
1e-5 relative; each gradient tensor within 5e-5 of its largest element plus
1e-7 (the step's difference w0 - w1 also rounds at about 1e-8). The Llama 3
variant also checks that its scaling matters: torch without it gives q_proj
gradients outside that tolerance.

Usage: python check_llama.py <dscore binary> <scratch dir>
"""
import json
import os
import struct
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

T = 16  # block_size
VOCAB = 300
MODEL = {
    "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    # Larger than the default 0.02, so attention is far from uniform and
    # the rotary embeddings (and their scaling) shape the gradients.
    "initializer_range": 0.15,
}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8}
VARIANTS = {
    "untied": {"tie_word_embeddings": False},
    "tied": {"tie_word_embeddings": True},
    "llama3_rope": {"tie_word_embeddings": False, "rope_scaling": LLAMA3},
}


def write_tokens(path, tokens):
    """llm.c's token shard: 256 int32 header {20240520, 1, count}, then uint16 tokens."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout


# The splits the models are trained in again: (ranks, config members).
SPLITS = {
    "tp2": (2, {"tensor_parallel": {"autotp_size": 2}}),
    "sp2": (2, {"sequence_parallel_size": 2}),
    "pp2_tp2": (4, {"pipeline": {"stages": 2}, "tensor_parallel": {"autotp_size": 2}}),
}


def dscore_step(dscore, work, name, model, data, lr, split=None):
    """One SGD step at lr from the seeded init (split as SPLITS says); returns (loss at step 1,
    exported weights)."""
    ckpt = os.path.join(work, f"{name}_ckpt")
    config = {
        "train_batch_size": 2, "train_steps": 1, "seed": 11, "gradient_clipping": 0.0,
        "optimizer": {"type": "SGD", "params": {"lr": lr}},
        "model": dict(model, type="llama", block_size=T),
        "data": {"type": "tokens", "path": data, "shuffle": False},
        "checkpoint_dir": ckpt, "save_interval": 1,
    }
    ranks, members = SPLITS[split] if split else (1, {})
    config.update(members)
    path = os.path.join(work, f"{name}.json")
    with open(path, "w") as f:
        json.dump(config, f)
    out = run([dscore, "run", "--config", path, "-n", str(ranks)])
    losses = [float(line.split("| loss ")[1].split()[0]) for line in out.splitlines()
              if line.startswith("step 1/1")]
    if len(losses) != 1:
        sys.exit(f"no step 1 loss in:\n{out}")
    export = os.path.join(work, f"{name}_fp32")
    run([dscore, "zero-to-fp32", ckpt, export])
    return losses[0], load_file(os.path.join(export, "model.safetensors")), ckpt


def hf_model(model):
    rope = {"rope_type": "default", "rope_theta": model["rope_theta"]}
    if "rope_scaling" in model:
        rope = dict(model["rope_scaling"], rope_theta=model["rope_theta"])
    kwargs = {k: v for k, v in model.items() if k not in ("rope_theta", "rope_scaling")}
    config = LlamaConfig(**kwargs, rope_parameters=rope, attention_bias=False, mlp_bias=False,
                         attn_implementation="eager")
    return LlamaForCausalLM(config).float()


def check_variant(dscore, work, name, extra, batch_tokens, failures, split=None):
    model = dict(MODEL, **extra)
    data = os.path.join(work, f"{name}_tokens.bin")
    write_tokens(data, batch_tokens)
    loss0, w0, ckpt0 = dscore_step(dscore, work, name + "_lr0", model, data, 0.0, split)
    loss1, w1, _ = dscore_step(dscore, work, name + "_lr1", model, data, 1.0, split)

    hf = hf_model(model)
    missing, unexpected = hf.load_state_dict(w0, strict=False)
    # A tied model's lm_head.weight is the embedding (transformers ties it).
    missing = [k for k in missing if not (k == "lm_head.weight" and extra["tie_word_embeddings"])]
    ok = not missing and not unexpected
    print(f"check_llama_{name}_state_dict_loads: {'ok' if ok else 'FAILED'} "
          f"(missing {missing}, unexpected {unexpected}, {len(w0)} tensors)")
    if not ok:
        failures.append(name + " state_dict")
        return
    if extra["tie_word_embeddings"]:
        hf.tie_weights()
    rows = torch.tensor([batch_tokens[0:T + 1], batch_tokens[T:2 * T + 1]], dtype=torch.long)
    out = hf(input_ids=rows, labels=rows)
    torch_loss = out.loss.item()
    rel = abs(loss0 - torch_loss) / abs(torch_loss)
    ok = rel <= 1e-5 and loss0 == loss1
    print(f"check_llama_{name}_loss: {'ok' if ok else 'FAILED'} (dscore {loss0:.6f}, "
          f"torch {torch_loss:.6f}, relative {rel:.1e}; limit 1e-5)")
    if not ok:
        failures.append(name + " loss")

    out.loss.backward()
    grads = dict(hf.named_parameters())
    worst = 0.0
    for key, w in w0.items():
        got = (w - w1[key]).double()  # lr 1: w1 = w0 - g
        want = grads[key].grad.double()
        error = (got - want).abs().max().item()
        limit = 5e-5 * want.abs().max().item() + 1e-7
        worst = max(worst, error / limit)
        if error > limit:
            failures.append(f"{name} gradient {key}")
            print(f"  {key}: max |dscore - torch| {error:.2e} > {limit:.2e}")
    print(f"check_llama_{name}_gradients: {'ok' if worst <= 1 else 'FAILED'} "
          f"({len(w0)} tensors; worst error {worst:.2f} of its limit)")
    if "rope_scaling" in model:  # the same weights without the scaling: a different gradient
        plain = hf_model({k: v for k, v in model.items() if k != "rope_scaling"})
        plain.load_state_dict(w0)
        plain(input_ids=rows, labels=rows).loss.backward()
        key = "model.layers.0.self_attn.q_proj.weight"
        want = grads[key].grad
        apart = (dict(plain.named_parameters())[key].grad - want).abs().max().item()
        limit = 5e-5 * want.abs().max().item() + 1e-7
        ok = apart > 10 * limit
        print(f"check_llama_{name}_scaling_matters: {'ok' if ok else 'FAILED'} (without it "
              f"{key}'s gradient moves {apart:.2e}, {apart / limit:.0f}x the tolerance)")
        if not ok:
            failures.append(name + " scaling matters")

    prompt = batch_tokens[3:8]
    generated = run([dscore, "generate", "--checkpoint", ckpt0, "--prompt-tokens",
                     ",".join(map(str, prompt)), "--temperature", "0", "--max-new-tokens", "8"])
    dscore_ids = [int(t) for t in generated.strip().split(",")]
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            logits = hf(input_ids=torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    ok = dscore_ids == ids
    print(f"check_llama_{name}_greedy: {'ok' if ok else 'FAILED'} (dscore {dscore_ids[5:]}, "
          f"torch {ids[5:]})")
    if not ok:
        failures.append(name + " greedy")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    dscore, work = os.path.realpath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    rng = np.random.default_rng(3)
    batch_tokens = [int(t) for t in rng.integers(0, VOCAB, size=2 * T + 1)]
    failures = []
    for name, extra in VARIANTS.items():
        check_variant(dscore, work, name, extra, batch_tokens, failures)
    for split in SPLITS:
        for name in ("untied", "tied"):
            check_variant(dscore, work, f"{name}_{split}", VARIANTS[name], batch_tokens, failures,
                          split)
    if failures:
        sys.exit("check_llama: FAILED: " + ", ".join(failures))
    print("check_llama: all passed")


if __name__ == "__main__":
    main()
