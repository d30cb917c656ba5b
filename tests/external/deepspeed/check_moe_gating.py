"""dscore's MoE routing (moe/gating.h, through the moe_gating_tool filter)
against DeepSpeed's own top1gating / top2gating / topkgating
(deepspeed.moe.sharded_moe, called as TopKGate calls them, with
sparse_routes=True as MOELayer does).

A grid of hidden size x tokens x experts x k with capacity factors that
overflow, min_capacity, drop_tokens on and off, RTS, RSample and top-2's
second-expert sampling, training and evaluation. The gate's logits are
F.linear(x, wg) in fp32 as TopKGate computes them; both sides route the
same logits. The random draws DeepSpeed makes inside (gumbel_rsample, the
RTS uniform) are replaced by tensors drawn here and handed to dscore too.

Checked per case: the capacity, the per-expert counts, every route's expert
(-1 dropped) and slot, exactly; the combine weights, the aux loss and the
gradient of sum(weights * R) + a * l_aux with respect to the logits (torch
autograd through DeepSpeed's function) within 1e-6 (absolute, or relative
above 1). The dropless top-k of Mixtral / Qwen-MoE is checked against the
same torch formula transformers' routers use (softmax, top-k, optional
renormalisation; the load-balancing loss of load_balancing_loss_func).

Usage: check_moe_gating.py <dscore binary>  (moe_gating_tool beside it)
"""
import itertools
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from deepspeed.moe import sharded_moe

TOL = 1e-6


def tool_path(dscore):
    path = os.path.join(os.path.dirname(os.path.realpath(dscore)), "moe_gating_tool")
    if not os.access(path, os.X_OK):
        sys.exit(f"check_moe_gating: {path} is missing: build the moe_gating_tool target")
    return path


def run_tool(tool, case, logits, gumbel, uniform, dweight, daux):
    S, E = logits.shape
    header = [case["router"], case["k"], E, S, int(case["training"]), case["cf"], case["eval_cf"],
              case["min_capacity"], int(case["drop_tokens"]), int(case["use_rts"]),
              {None: 0, "RSample": 1, "Jitter": 2}[case["noisy"]], int(case["sampling"]),
              {"probs": 0, "position": 1}[case["drop_policy"]], int(case["norm"])]
    parts = [" ".join(str(h) for h in header)]

    def floats(t):
        return " ".join(repr(float(v)) for v in t.reshape(-1).tolist())

    parts.append(floats(logits))
    for noise in (gumbel, uniform):
        parts.append("0" if noise is None else "1 " + floats(noise))
    parts.append(floats(dweight))
    parts.append(repr(float(daux)))
    out = subprocess.run([tool], input="\n".join(parts) + "\n", capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"check_moe_gating: moe_gating_tool failed on {case}: {out.stderr}")
    result = {}
    for line in out.stdout.splitlines():
        name, *values = line.split()
        result[name] = values
    return result


def deepspeed_routes(case, logits, gumbel, uniform):
    """DeepSpeed's routing of `logits` (a leaf), as TopKGate.forward calls it."""
    sharded_moe.gumbel_rsample = lambda shape, device: gumbel.clone()
    sharded_moe.exp_selection_uniform_map[logits.device] = lambda shape: uniform.clone()
    x = logits * 1.0  # top2gating adds its noise in place: not on the leaf
    cf = case["cf"] if case["training"] else case["eval_cf"]
    k = case["k"]
    if k == 1:
        out = sharded_moe.top1gating(x, cf, case["min_capacity"], None,
                                     case["noisy"] if case["training"] else None,
                                     case["drop_tokens"], case["use_rts"], None, True)
    elif k == 2:
        out = sharded_moe.top2gating(x, cf, case["min_capacity"], case["drop_tokens"], None,
                                     case["sampling"], True)
    else:
        out = sharded_moe.topkgating(x, k, cf, case["min_capacity"], case["drop_tokens"], None,
                                     case["drop_policy"], True)
    l_aux, capacity, _, indices, locations, gates, counts = out
    return l_aux, int(capacity), indices.long(), locations.long(), gates, counts.long()


def dropless_routes(case, logits):
    """transformers' Mixtral / Qwen-MoE router and load-balancing loss (one layer)."""
    S, E = logits.shape
    probs = F.softmax(logits, dim=1, dtype=torch.float)
    weights, selected = torch.topk(probs, case["k"], dim=-1)
    if case["norm"]:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    mask = F.one_hot(selected, E)  # S x k x E
    tokens_per_expert = mask.float().mean(dim=0)
    l_aux = torch.sum(tokens_per_expert * probs.mean(dim=0).unsqueeze(0)) * E
    counts = mask.sum(dim=(0, 1))
    return l_aux, int(counts.max()), selected.t(), None, weights.t(), counts


def cases():
    grid = []
    seed = 0
    for (M, S, E), k in itertools.product([(16, 8, 2), (32, 64, 8), (64, 257, 16), (24, 40, 8)],
                                          [1, 2, 4]):
        if k > E:
            continue
        for cf, min_capacity, drop, training in [(1.0, 4, True, True), (0.5, 0, True, True),
                                                 (2.0, 0, True, False), (1.0, 0, False, True),
                                                 (0.25, 2, True, False)]:
            variants = [dict()]
            if k == 1:
                variants = [dict(use_rts=True, noisy=None), dict(use_rts=False, noisy=None),
                            dict(use_rts=True, noisy="RSample")]
            elif k == 2:
                variants = [dict(sampling=True), dict(sampling=False)]
            else:
                variants = [dict(drop_policy="probs"), dict(drop_policy="position")]
            for v in variants:
                seed += 1
                case = dict(router=0, M=M, S=S, E=E, k=k, cf=cf, eval_cf=cf * 1.5,
                            min_capacity=min_capacity, drop_tokens=drop, training=training,
                            use_rts=False, noisy=None, sampling=False, drop_policy="probs",
                            norm=True, seed=seed)
                case.update(v)
                grid.append(case)
    for (M, S, E), k, norm in itertools.product([(32, 64, 8), (16, 33, 4)], [1, 2], [True, False]):
        seed += 1
        grid.append(dict(router=1, M=M, S=S, E=E, k=k, cf=1.0, eval_cf=1.0, min_capacity=0,
                         drop_tokens=False, training=True, use_rts=False, noisy=None,
                         sampling=False, drop_policy="probs", norm=norm, seed=seed))
    return grid


def main():
    tool = tool_path(sys.argv[1])
    worst = {"weight": 0.0, "aux": 0.0, "dlogits": 0.0}
    dropped_cases = rts_overflow = 0
    failures = []
    grid = cases()
    for case in grid:
        torch.manual_seed(case["seed"])
        S, E, M, k = case["S"], case["E"], case["M"], case["k"]
        x = torch.randn(S, M)
        wg = torch.randn(E, M) * (0.5 / M ** 0.5) * 4
        logits = F.linear(x, wg).detach().requires_grad_()
        gumbel = torch.distributions.gumbel.Gumbel(0.0, 1.0).rsample((S, E))
        uniform = torch.rand(S, E)
        dweight = torch.randn(k, S)
        daux = 0.37
        if case["router"] == 0:
            l_aux, capacity, indices, locations, gates, counts = deepspeed_routes(
                case, logits, gumbel, uniform)
        else:
            l_aux, capacity, indices, locations, gates, counts = dropless_routes(case, logits)
        (torch.sum(gates * dweight) + daux * l_aux).backward()
        ours = run_tool(tool, case, logits.detach(), gumbel, uniform, dweight, daux)

        def fail(what):
            failures.append(f"{what}: {case}")

        if int(ours["capacity"][0]) != capacity:
            fail(f"capacity {ours['capacity'][0]} != DeepSpeed's {capacity}")
        if [int(v) for v in ours["counts"]] != counts.tolist():
            fail(f"counts {ours['counts']} != {counts.tolist()}")
        expert = torch.tensor([int(v) for v in ours["expert"]]).view(k, S)
        if not torch.equal(expert, indices):
            fail(f"experts differ at {int((expert != indices).sum())} routes")
        if locations is not None:
            slot = torch.tensor([int(v) for v in ours["slot"]]).view(k, S)
            if not torch.equal(slot, locations):
                fail(f"slots differ at {int((slot != locations).sum())} routes")
        else:  # dropless: every route kept, slots unique per expert and below the capacity
            slot = torch.tensor([int(v) for v in ours["slot"]]).view(k, S)
            pairs = set(zip(expert.reshape(-1).tolist(), slot.reshape(-1).tolist()))
            if len(pairs) != k * S or int(slot.max()) >= capacity:
                fail("dropless slots are not distinct within the capacity")
        dropped = int((indices < 0).sum())
        if int(ours["dropped"][0]) != dropped:
            fail(f"dropped {ours['dropped'][0]} != DeepSpeed's {dropped}")
        dropped_cases += dropped > 0
        rts_overflow += dropped > 0 and case["k"] == 1 and case["use_rts"]

        def differ(name, ours_values, theirs):
            theirs = theirs.detach().reshape(-1).double()
            mine = torch.tensor([float(v) for v in ours_values], dtype=torch.float64)
            scale = torch.clamp(theirs.abs(), min=1.0)
            d = float(((mine - theirs).abs() / scale).max())
            worst[name] = max(worst[name], d)
            if d > TOL:
                fail(f"{name} differs by {d:.3g}")

        differ("weight", ours["weight"], gates)
        differ("aux", ours["aux"], l_aux.reshape(1))
        differ("dlogits", ours["dlogits"], logits.grad)
    print(f"check_moe_gating: {len(grid)} cases ({dropped_cases} with dropped routes, "
          f"{rts_overflow} of them top-1 with RTS over capacity); largest differences: "
          f"weights {worst['weight']:.2g}, aux loss {worst['aux']:.2g}, "
          f"logits' gradient {worst['dlogits']:.2g} (tolerance {TOL})")
    if failures:
        for f in failures[:20]:
            print("check_moe_gating: FAILED:", f)
        sys.exit(1)
    print("check_moe_gating: passed")


if __name__ == "__main__":
    main()
