"""One rank of a DeepSpeed run that trains dscore's gpt with MoE blocks, built
in torch with DeepSpeed-MoE's own layer (deepspeed.moe.layer.MoE) as the MLP
of every moe_every-th block, from the same initial values dscore's gpt
plugin gives its parameters (dscore_init below: the counter-based normal
draws of gpt_params.cc), on an llm.c token shard read as `dscore run` reads
it (ds_llama_worker.sample_rows). The loss is dscore's: the mean
cross-entropy plus moe_loss_coeff times the blocks' summed l_aux. Rank 0
writes the per-step losses as JSON, with each step's smallest routing
margin over all ranks (Margins) and its routes per expert.

Usage: ds_moe_gpt_worker.py <result.json> <model.json> <token shard> <steps> <ds_config.json>
  model.json: the gpt's model section (n_layer, n_head, n_embd, block_size,
  vocab_size, seed and the moe_* keys used here; "ep_size": DeepSpeed-MoE's
  expert parallelism, each rank holding its share of dscore's experts).
With "check_forward": the model's mean cross-entropy on the first sample's
first T tokens (a prompt: T - 1 targets) in evaluation mode, for `dscore
forward` to match, instead of training.
"""
import json
import math
import sys
import time

import deepspeed
import numpy as np
import torch
import torch.nn.functional as F
from deepspeed.moe.layer import MoE
from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

from ds_llama_worker import read_shard, sample_rows

M64 = (1 << 64) - 1
BLOCKS = "h"  # the gpt names block l's tensors transformer.<BLOCKS>.<l>.*


def splitmix64(x):
    x = (x + np.uint64(0x9e3779b97f4a7c15))
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return x ^ (x >> np.uint64(31))


def hash_name(name):
    h = 0xcbf29ce484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001b3) & M64
    return h


def normal_at(seed, key, index):
    """sdk/include/dscore/cpp/counter_rng.hpp's normal_at over an index array."""
    def key4(d):
        x = splitmix64(np.full(index.shape, np.uint64(seed)))
        x = splitmix64(x ^ np.uint64(key))
        x = splitmix64(x ^ index)
        return splitmix64(x ^ np.uint64(d))
    with np.errstate(over="ignore"):
        u1 = 1.0 - (key4(1) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        u2 = (key4(2) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)


def dscore_init(name, shape, kind, seed, n_layer):
    """A parameter's initial value as gpt_params.cc makes it (whole tensor)."""
    numel = int(np.prod(shape))
    if kind == "zero":
        return torch.zeros(shape)
    if kind == "one":
        return torch.ones(shape)
    std = 0.02 / (math.sqrt(2.0 * n_layer) if kind == "residual" else 1.0)
    values = std * normal_at(seed, hash_name(name), np.arange(numel, dtype=np.uint64))
    return torch.tensor(values.astype(np.float32)).reshape(shape)


class Mlp(torch.nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = torch.nn.Linear(C, 4 * C)
        self.c_proj = torch.nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(torch.nn.Module):
    def __init__(self, cfg, moe):
        super().__init__()
        C = cfg["n_embd"]
        self.n_head = cfg["n_head"]
        self.ln_1 = torch.nn.LayerNorm(C)
        self.c_attn = torch.nn.Linear(C, 3 * C)
        self.attn_proj = torch.nn.Linear(C, C)
        self.ln_2 = torch.nn.LayerNorm(C)
        self.moe = moe
        self.counts = None  # the routes each expert was chosen for, summed since taken
        if moe:
            self.mlp = MoE(C, Mlp(C), num_experts=cfg["moe_num_experts"],
                           ep_size=cfg.get("ep_size", 1), k=cfg["moe_k"],
                           capacity_factor=cfg["moe_capacity_factor"],
                           eval_capacity_factor=cfg["moe_eval_capacity_factor"],
                           min_capacity=cfg["moe_min_capacity"],
                           use_residual=cfg.get("moe_use_residual", False), noisy_gate_policy=None,
                           drop_tokens=cfg.get("moe_drop_tokens", True), use_rts=cfg["moe_use_rts"],
                           top2_2nd_expert_sampling=cfg["moe_top2_2nd_expert_sampling"])
        else:
            self.mlp = Mlp(C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        h = self.ln_2(x)
        if self.moe:
            out, l_aux, counts = self.mlp(h)
            self.counts = counts.detach().double() + (self.counts if self.counts is not None else 0)
            return x + out, l_aux
        return x + self.mlp(h), torch.zeros(())


class Gpt(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = torch.nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.wpe = torch.nn.Embedding(cfg["block_size"], cfg["n_embd"])
        every = cfg.get("moe_every", 2)
        self.blocks = torch.nn.ModuleList(
            [Block(cfg, (l + 1) % every == 0) for l in range(cfg["n_layer"])])
        self.ln_f = torch.nn.LayerNorm(cfg["n_embd"])

    def forward(self, rows, counted=None):
        """The mean cross-entropy over the first `counted` positions' targets
        (all T by default) and the blocks' summed l_aux."""
        T = self.cfg["block_size"]
        counted = T if counted is None else counted
        x = self.wte(rows[:, :T]) + self.wpe(torch.arange(T))
        aux = torch.zeros(())
        for block in self.blocks:
            x, l_aux = block(x)
            aux = aux + l_aux
        logits = self.ln_f(x) @ self.wte.weight.t()
        ce = F.cross_entropy(logits[:, :counted].reshape(-1, logits.shape[-1]),
                             rows[:, 1:counted + 1].reshape(-1))
        return ce, aux


class Margins:
    """The smallest gap, over a step's tokens, between the gate logits that
    decide a token's experts (each adjacent pair of its k + 1 largest: a
    swap there changes its experts or its slot order). Where it is below
    the two sides' fp32 rounding, dscore and DeepSpeed may route that token
    differently and both be right."""

    def __init__(self, model):
        self.smallest = float("inf")
        for block in model.blocks:
            if block.moe:
                gate = block.mlp.deepspeed_moe.gate
                gate.register_forward_pre_hook(self.hook)

    def hook(self, gate, args):
        with torch.no_grad():
            logits = F.linear(args[0].float(), gate.wg.weight.float())
            top = torch.topk(logits, min(gate.k + 1, logits.shape[1]), dim=1).values
            gaps = top[:, :-1] - top[:, 1:]
            self.smallest = min(self.smallest, float(gaps.min()))

    def take(self):
        value, self.smallest = self.smallest, float("inf")
        return value


def load_dscore_init(model, cfg):
    """Every tensor of `model` from dscore's names, shapes and init kinds."""
    seed, L, C, E = cfg["seed"], cfg["n_layer"], cfg["n_embd"], cfg.get("moe_num_experts", 0)

    def put(tensor, name, shape, kind):
        with torch.no_grad():
            tensor.copy_(dscore_init(name, shape, kind, seed, L).reshape(tensor.shape))

    put(model.wte.weight, "transformer.wte.weight", [cfg["vocab_size"], C], "normal")
    put(model.wpe.weight, "transformer.wpe.weight", [cfg["block_size"], C], "normal")
    for l, b in enumerate(model.blocks):
        h = f"transformer.{BLOCKS}.{l}."
        put(b.ln_1.weight, h + "ln_1.weight", [C], "one")
        put(b.ln_1.bias, h + "ln_1.bias", [C], "zero")
        put(b.c_attn.weight, h + "attn.c_attn.weight", [3 * C, C], "normal")
        put(b.c_attn.bias, h + "attn.c_attn.bias", [3 * C], "zero")
        put(b.attn_proj.weight, h + "attn.c_proj.weight", [C, C], "residual")
        put(b.attn_proj.bias, h + "attn.c_proj.bias", [C], "zero")
        put(b.ln_2.weight, h + "ln_2.weight", [C], "one")
        put(b.ln_2.bias, h + "ln_2.bias", [C], "zero")

        def mlp(m, prefix):
            put(m.c_fc.weight, prefix + "c_fc.weight", [4 * C, C], "normal")
            put(m.c_fc.bias, prefix + "c_fc.bias", [4 * C], "zero")
            put(m.c_proj.weight, prefix + "c_proj.weight", [C, 4 * C], "residual")
            put(m.c_proj.bias, prefix + "c_proj.bias", [C], "zero")

        if not b.moe:
            mlp(b.mlp, h + "mlp.")
            continue
        moe = b.mlp.deepspeed_moe
        put(moe.gate.wg.weight, h + "mlp.gate.wg.weight", [E, C], "normal")
        stacked = {k: dscore_init(h + "mlp.experts." + k, s, kind, seed, L) for k, s, kind in [
            ("c_fc.weight", [E, 4 * C, C], "normal"), ("c_fc.bias", [E, 4 * C], "zero"),
            ("c_proj.weight", [E, C, 4 * C], "residual"), ("c_proj.bias", [E, C], "zero")]}
        # Under ep_size > 1 this rank holds E / ep_size of them: its expert
        # group's place (consecutive ranks, DeepSpeed's default order).
        local = moe.experts.deepspeed_experts
        first = (torch.distributed.get_rank() % cfg.get("ep_size", 1)) * len(local)
        for e, expert in enumerate(local, start=first):
            with torch.no_grad():
                expert.c_fc.weight.copy_(stacked["c_fc.weight"][e])
                expert.c_fc.bias.copy_(stacked["c_fc.bias"][e])
                expert.c_proj.weight.copy_(stacked["c_proj.weight"][e])
                expert.c_proj.bias.copy_(stacked["c_proj.bias"][e])
        if cfg.get("moe_use_residual", False):
            mlp(b.mlp.mlp, h + "mlp.mlp.")
            put(b.mlp.coefficient.weight, h + "mlp.coefficient.weight", [2, C], "normal")
            put(b.mlp.coefficient.bias, h + "mlp.coefficient.bias", [2], "zero")
    put(model.ln_f.weight, "transformer.ln_f.weight", [C], "one")
    put(model.ln_f.bias, "transformer.ln_f.bias", [C], "zero")


def main():
    result_path, model_path, shard, steps, config_path = sys.argv[1:6]
    steps = int(steps)
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    torch.set_num_threads(1)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    with open(model_path) as f:
        cfg = json.load(f)
    with open(config_path) as f:
        ds_config = json.load(f)
    T = cfg["block_size"]
    tokens = read_shard(shard)
    model = Gpt(cfg)
    load_dscore_init(model, cfg)
    groups = split_params_into_different_moe_groups_for_optimizer(
        {"params": list(model.parameters()), "name": "parameters"})
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=groups, config=ds_config)
    if cfg.get("check_forward"):
        engine.eval()
        with torch.no_grad():
            ce, _ = engine(sample_rows(tokens, T, 0, 1), counted=T - 1)
        if rank == 0:
            with open(result_path, "w") as f:
                json.dump({"forward_loss": ce.item()}, f)
        torch.distributed.barrier()
        return
    micro, gas = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    batch = micro * gas * world
    coeff = cfg["moe_loss_coeff"]
    margins = Margins(model)
    losses, step_margins, step_counts, step_seconds = [], [], [], []
    for step in range(steps):
        started = time.perf_counter()
        rank_loss = 0.0
        for m in range(gas):
            rows = sample_rows(tokens, T, step * batch + m * micro * world + rank * micro, micro)
            ce, aux = engine(rows)
            loss = ce + coeff * aux
            engine.backward(loss)
            engine.step()
            rank_loss += loss.item() / gas
        losses.append(rank_loss)
        step_seconds.append(time.perf_counter() - started)
        # The routes per expert, summed over the MoE blocks, micro-batches and ranks.
        counts = sum(b.counts for b in model.blocks if b.moe)
        for b in model.blocks:
            b.counts = None
        torch.distributed.all_reduce(counts)
        step_counts.append(counts.tolist())
        smallest = torch.tensor([margins.take()], dtype=torch.float64)
        torch.distributed.all_reduce(smallest, op=torch.distributed.ReduceOp.MIN)
        step_margins.append(smallest.item())
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"losses": losses, "margins": step_margins, "counts": step_counts,
                       "step_seconds": step_seconds, "deepspeed": deepspeed.__version__}, f)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
