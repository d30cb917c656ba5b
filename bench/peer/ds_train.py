"""The peer of dscore's benches: the same model in PyTorch, trained by DeepSpeed.

One rank of a `torchrun --nproc_per_node N` job on DeepSpeed's CPU
accelerator (DS_ACCELERATOR=cpu) with gloo. It reads the same ds_config.json
that `dscore run` reads (bench/peer/run.sh writes one per row) and builds the
model of its "model" section:
  - "type": "gpt": exactly as the `gpt` plugin does (plugins/models/gpt:
    GPT-2 layout, pre-LayerNorm blocks, tanh GELU, tied LM head, learned
    position embeddings, biases everywhere, LayerNorm eps 1e-5, GPT-2's
    initialisation);
  - "from_pretrained": DIR (types "llama" and "gpt2"): transformers'
    AutoModelForCausalLM.from_pretrained(DIR) in fp32, SDPA attention,
    fine-tuned from those weights as `dscore run` does.
It trains train_steps steps on random (T + 1)-byte windows of the config's
text file (T = the model section's block_size), and times the steps after --warmup.

Rank 0 prints one machine-readable line:
  peer_result {"tokens_per_s": ..., "params": ..., "losses": [...], ...}

Usage (from run.sh): torchrun --nproc_per_node N ds_train.py --config F [--warmup W]
"""
import argparse
import json
import math
import os
import time

import deepspeed
import torch
import torch.nn as nn
import torch.nn.functional as F

# Top-level keys only `dscore run` reads; they are stripped before the dict
# goes to deepspeed.initialize. DeepSpeed ignores unknown top-level keys
# today, but handing it only its own keeps the overlap of the two configs
# explicit and a future schema check from refusing the file:
#   model        the gpt plugin's hyperparameters (read here to build the model)
#   data         the text file (read here for the batches)
#   plugins      dscore's plugin search path
#   train_steps  the step count of `dscore run` (read here: warm-up + timed steps)
#   seed         dscore's initialisation seed (read here for torch.manual_seed)
#   csv_monitor, checkpoint_dir, comm: dscore's monitor, checkpoint and comm plugin settings
DSCORE_ONLY = {"model", "data", "plugins", "train_steps", "seed", "csv_monitor", "checkpoint_dir",
               "comm", "pipeline"}


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.attn.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    """nanoGPT's names (transformer.wte, transformer.h.N.attn.c_attn, ...), as gpt_params.cc."""

    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab_size, n_embd)
        self.transformer.wpe = nn.Embedding(block_size, n_embd)
        self.transformer.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.transformer.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        # GPT-2's initialisation, as gpt_params.cc: N(0, 0.02), the residual
        # projections N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm 1.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = self.transformer
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = t.wte(idx) + t.wpe(pos)
        for block in getattr(t, "h"):  # (not t-dot-h: doc_references reads that as a header)
            x = block(x)
        logits = F.linear(t.ln_f(x), t.wte.weight)  # the LM head tied to wte
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


class Embed(nn.Module):
    """The pipeline's first layer: token and position embeddings (wte is
    tied to the LM head of the last, DeepSpeed's TiedLayerSpec)."""

    def __init__(self, gpt):
        super().__init__()
        self.wte, self.wpe = gpt.transformer.wte, gpt.transformer.wpe

    def forward(self, idx):
        return self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))


def pipeline_module(gpt, stages):
    """The Gpt as DeepSpeed's PipelineModule: embeddings, blocks, ln_f, the
    tied LM head; cut by parameter count (as dscore's "pipeline" section's
    default), loss the gpt's cross-entropy."""
    from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec

    def head(embed, x):
        return F.linear(x, embed.wte.weight)

    def loss(logits, targets):
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))

    blocks = list(getattr(gpt.transformer, "h"))
    layers = [TiedLayerSpec("embed", Embed, gpt, tied_weight_attr="wte.weight")]
    layers += [LayerSpec(_Given, b) for b in blocks] + [LayerSpec(_Given, gpt.transformer.ln_f)]
    layers.append(TiedLayerSpec("embed", Embed, gpt, forward_fn=head, tied_weight_attr="wte.weight"))
    return PipelineModule(layers=layers, loss_fn=loss, num_stages=stages, partition_method="parameters")


class _Given(nn.Module):
    """A LayerSpec of a module built already (the Gpt's own, so both
    pipeline sides start from the same initialisation)."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x)


class Pretrained(nn.Module):
    """A Hugging Face causal LM from a folder, fp32, with the loss taken as
    the gpt model's: cross-entropy of the logits at every position against
    the next token (the batch already holds inputs and targets apart)."""

    def __init__(self, folder):
        super().__init__()
        from transformers import AutoModelForCausalLM
        self.hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")

    def forward(self, idx, targets):
        logits = self.hf(input_ids=idx).logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


def param_groups(model):
    # As the gpt plugin flags them: 1-D tensors (biases, LayerNorm) get no weight decay.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="the ds_config.json dscore reads too")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    args = ap.parse_args()
    with open(args.config) as f:
        config = json.load(f)
    m = config["model"]
    if m.get("type") != "gpt" and "from_pretrained" not in m:
        raise SystemExit(f"ds_train.py: {args.config}: model.type is {m.get('type')!r}: only 'gpt' or a "
                         "model section with from_pretrained is built here")
    steps = int(config["train_steps"])
    if steps <= args.warmup:
        raise SystemExit(f"ds_train.py: train_steps {steps} must exceed --warmup {args.warmup}")
    ds_config = {k: v for k, v in config.items() if k not in DSCORE_ONLY}

    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    threads = int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads()))
    torch.set_num_threads(threads)
    torch.manual_seed(int(config.get("seed", 42)))
    T = int(m["block_size"])
    if "from_pretrained" in m:
        model = Pretrained(m["from_pretrained"])
    else:
        model = Gpt(int(m["n_layer"]), int(m["n_head"]), int(m["n_embd"]), T, int(m["vocab_size"]))
    params = sum(p.numel() for p in model.parameters())  # a tied embedding once
    stages = int(config.get("pipeline", {}).get("stages", 1))
    if stages > 1:
        model = pipeline_module(model, stages)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=param_groups(model), config=ds_config)
    if engine.zero_optimization_stage() == 3 and isinstance(model, Gpt):
        # The LM head reads wte's weight outside wte's own forward: ZeRO-3
        # must gather it for the parent module too.
        deepspeed.zero.register_external_parameter(engine.module, engine.module.transformer.wte.weight)

    with open(config["data"]["path"], "rb") as f:
        text = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).to(torch.long)
    if text.numel() <= T + 1:
        raise SystemExit(f"ds_train.py: {config['data']['path']} holds {text.numel()} bytes; need more than {T + 1}")
    micro = engine.train_micro_batch_size_per_gpu()
    gen = torch.Generator().manual_seed(1000 + rank)
    offsets = torch.arange(T + 1)

    def batch():
        starts = torch.randint(0, text.numel() - T - 1, (micro,), generator=gen)
        tokens = text[starts[:, None] + offsets]
        return tokens[:, :-1], tokens[:, 1:]

    losses, start = [], None
    for step in range(steps):
        if step == args.warmup:
            torch.distributed.barrier()
            start = time.perf_counter()
        if stages > 1:  # the whole batch through the schedule; the loss is the last stage's mean
            loss = engine.train_batch(data_iter=iter([batch() for _ in range(engine.gradient_accumulation_steps())]))
        else:
            for _ in range(engine.gradient_accumulation_steps()):
                x, y = batch()
                loss = engine(x, y)
                engine.backward(loss)
                engine.step()
        losses.append(loss.item())
    torch.distributed.barrier()
    elapsed = time.perf_counter() - start
    mean = torch.tensor(losses, dtype=torch.float64)
    torch.distributed.all_reduce(mean)
    mean /= world
    timed = steps - args.warmup
    if rank == 0:
        result = {"tokens_per_s": timed * engine.train_batch_size() * T / elapsed,
                  "step_s": elapsed / timed, "params": params, "world": world,
                  "threads_per_rank": torch.get_num_threads(), "zero_stage": engine.zero_optimization_stage(),
                  "bf16": engine.bfloat16_enabled(), "optimizer": type(engine.basic_optimizer).__name__
                  if getattr(engine, "basic_optimizer", None) else type(engine.optimizer).__name__,
                  "losses": [round(v, 6) for v in mean.tolist()],
                  "deepspeed": deepspeed.__version__, "torch": torch.__version__}
        print("peer_result " + json.dumps(result), flush=True)
    engine.destroy()


if __name__ == "__main__":
    main()
