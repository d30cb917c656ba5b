"""Per-step losses of a GPT-2 of a given depth and width, trained by `dscore run` and by torch from
identical weights on identical samples: is dscore's math right at this width?

transformers initialises a GPT2LMHeadModel (seed 0) and saves it; `dscore run` trains it through
"gpt2" from_pretrained, ZeRO-0, one 64-token sample a step in file order (configs/data/
quickstart.txt's bytes), AdamW (betas 0.9/0.95, weight decay 0.1), clipping 1.0; torch trains the
same folder with the same samples, AdamW and clipping: fp32, or bf16 autocast over fp32 master
weights (dscore keeps bf16 weights beside an fp32 master). Prints both rows of losses.

Usage (the venv of bench/peer/run.sh): losses_vs_torch.py LAYERS N_EMBD HEADS fp32|bf16
       [--steps 4] [--lr 2e-5] [--dscore build/release/bin/dscore] [--dir /tmp/losses_vs_torch]
A 12 x 2560 model needs about 16 GB of RAM on the torch side.
"""
import argparse
import json
import os
import re
import struct
import subprocess

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T, VOCAB = 64, 256


def write_tokens(path, tokens):
    # llm.c's shard: 256 int32 header {20240520, 1, count}, then uint16 tokens.
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, len(tokens)] + [0] * 253)))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def dscore_losses(args, folder, data):
    config = {
        "train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
        "gradient_clipping": 1.0, "zero_optimization": {"stage": 0},
        "optimizer": {"type": "AdamW",
                      "params": {"lr": args.lr, "betas": [0.9, 0.95], "weight_decay": 0.1}},
        "model": {"type": "gpt2", "from_pretrained": folder, "block_size": T},
        "data": {"type": "tokens", "path": data, "shuffle": False},
        "train_steps": args.steps,
    }
    if args.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    path = os.path.join(args.dir, "ds_config.json")
    with open(path, "w") as f:
        json.dump(config, f, indent=1)
    out = subprocess.run([args.dscore, "run", "--config", path], capture_output=True, text=True,
                         check=True)
    return [float(x) for x in re.findall(r"\| loss ([0-9.eE+-]+)", out.stdout)]


def torch_losses(args, folder, tokens):
    model = GPT2LMHeadModel.from_pretrained(folder).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            eps=1e-8)
    losses = []
    for step in range(args.steps):
        batch = torch.tensor([tokens[step * T:step * T + T + 1]])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            logits = model(batch[:, :T]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB),
                                                 batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    p = argparse.ArgumentParser()
    p.add_argument("layers", type=int)
    p.add_argument("n_embd", type=int)
    p.add_argument("heads", type=int)
    p.add_argument("dtype", choices=["fp32", "bf16"])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--dscore", default=os.path.join(ROOT, "build/release/bin/dscore"))
    p.add_argument("--dir", default="/tmp/losses_vs_torch")
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    folder = os.path.join(args.dir, "L%d_C%d" % (args.layers, args.n_embd))
    if not os.path.exists(os.path.join(folder, "config.json")):
        torch.manual_seed(0)
        config = GPT2Config(n_layer=args.layers, n_embd=args.n_embd, n_head=args.heads,
                            vocab_size=VOCAB, n_positions=T, resid_pdrop=0.0, embd_pdrop=0.0,
                            attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
        GPT2LMHeadModel(config).save_pretrained(folder)
    with open(os.path.join(ROOT, "configs/data/quickstart.txt"), "rb") as f:
        tokens = list(f.read(args.steps * T + 1))
    data = os.path.join(args.dir, "tokens.bin")
    write_tokens(data, tokens)
    theirs = torch_losses(args, folder, tokens)
    ours = dscore_losses(args, folder, data)
    print("%d x %d, %s, lr %g" % (args.layers, args.n_embd, args.dtype, args.lr))
    print("dscore " + " ".join("%.4f" % x for x in ours))
    print("torch  " + " ".join("%.4f" % x for x in theirs))
    print("max |difference| %.2e" % max(abs(a - b) for a, b in zip(ours, theirs)))


if __name__ == "__main__":
    main()
