"""dscore's "llama" model against transformers' MixtralForCausalLM,
Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, Qwen2ForCausalLM and
Qwen3ForCausalLM.

transformers (5.x: experts fused in memory as gate_up_proj / down_proj,
saved per expert: Mixtral's block_sparse_moe.experts.N.w1/w2/w3, Qwen's
mlp.experts.N.gate_proj/down_proj/up_proj) builds tiny random models and
saves them with save_pretrained: a Mixtral (2 layers, hidden 64, 4 heads
over 2 key/value heads, 4 experts of width 96, top-2, vocab 300), a
Qwen3-MoE (3 layers, the first dense (mlp_only_layers), 4 experts of width
48 beside a dense MLP of 96, top-2 without renormalisation, head_dim 32 !=
hidden / heads, q_norm and k_norm), a Qwen2-MoE (2 layers, the first
dense (decoder_sparse_step 2), experts of width 48 and a shared expert of 80
behind its sigmoid gate, q/k/v biases), a dense Qwen3 and a dense Qwen2;
RMSNorm weights perturbed. For each:
  (a) logits: `dscore forward --config` (from_pretrained, block_size 32)
      gives every prefix's last-token logits and loss (padded to the block:
      the padding's routes left out of the aux loss): equal to
      transformers' in fp32 within 2e-5;
  (b) gradients: one SGD step (lr 1, no momentum or decay: w1 = w0 - g)
      from the folder, exported with zero-to-fp32, against torch autograd
      of the same batch, without and (MoE) with output_router_logits (the
      loss then adds router_aux_loss_coef times load_balancing_loss_func
      over the MoE blocks; the coefficient raised to 0.5 so its gradient
      shows): the loss within 1e-5 relative, every tensor within 5e-5 of
      its largest element plus 1e-7 (each expert's tensors mapped from
      transformers' fused ones);
  (c) greedy generation from that checkpoint equals argmax decoding in torch;
  (d) MoE: fine-tuning, 4 AdamW steps at `-n 2` (Mixtral: ZeRO stages 2
      and 3, which must agree; Qwen3-MoE: stage 3; Qwen2-MoE: stage 2)
      from the folder;
      export-hf; AutoModelForCausalLM loads the same class, whose logits
      equal `dscore forward --checkpoint`'s;
  (e) Mixtral: an MoE llama trained from scratch exports a config.json
      transformers reads as Mixtral, with equal logits;
  (f) bad input: router_jitter_noise and a sliding window shorter than
      block_size, each a non-zero exit naming the key.
Prints check_* lines; exits non-zero on the first failure.
Usage: python check_moe_models.py <dscore binary> <scratch dir>
"""
import json
import os
import shutil
import struct
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import (AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM,  # noqa: E402
                          Qwen2Config, Qwen2ForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

DSCORE = os.path.abspath(sys.argv[1])
SCRATCH = os.path.abspath(sys.argv[2])
T, VOCAB, TOL = 32, 300, 2e-5
EXPERTS = 4
BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
            # Larger than the default 0.02: routers far from uniform.
            initializer_range=0.1)
# name: (config class, model class, its keys, the experts' file prefix and names (gate, up, down),
# the router's file name relative to the block, their width)
FAMILIES = {
    "mixtral": (MixtralConfig, MixtralForCausalLM,
                dict(BASE, num_hidden_layers=2, num_local_experts=EXPERTS, num_experts_per_tok=2),
                "block_sparse_moe.experts.", ("w1", "w3", "w2"), "block_sparse_moe.gate.weight", 96),
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                  dict(BASE, num_hidden_layers=3, num_experts=EXPERTS, num_experts_per_tok=2,
                       moe_intermediate_size=48, norm_topk_prob=False, mlp_only_layers=[0],
                       head_dim=32),
                  "mlp.experts.", ("gate_proj", "up_proj", "down_proj"), "mlp.gate.weight", 48),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(BASE, num_hidden_layers=2, head_dim=32),
              None, None, None, 0),
    "qwen2_moe": (Qwen2MoeConfig, Qwen2MoeForCausalLM,
                  dict(BASE, num_hidden_layers=2, num_experts=EXPERTS, num_experts_per_tok=2,
                       moe_intermediate_size=48, shared_expert_intermediate_size=80,
                       norm_topk_prob=False, decoder_sparse_step=2),
                  "mlp.experts.", ("gate_proj", "up_proj", "down_proj"), "mlp.gate.weight", 48),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(BASE, num_hidden_layers=2), None, None, None, 0),
}

torch.manual_seed(0)
torch.set_num_threads(1)


def fail(msg):
    print("check_moe_models FAILED: " + msg)
    sys.exit(1)


def path(*parts):
    return os.path.join(SCRATCH, *parts)


def run(args, ok=True):
    r = subprocess.run([DSCORE] + args, capture_output=True, text=True, cwd=SCRATCH)
    if ok and r.returncode != 0:
        fail("dscore %s exited %d:\n%s\n%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def write_json(p, obj):
    with open(p, "w") as f:
        json.dump(obj, f, indent=1)


def token_shard(p, tokens):
    with open(p, "wb") as f:  # llm.c's shard: 256 int32 header, then uint16 tokens
        f.write(struct.pack("<256i", *([20240520, 1, len(tokens)] + [0] * 253)))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def tiny_model(family, **extra):
    config_class, model_class, keys = FAMILIES[family][:3]
    m = model_class(config_class(**keys, **extra, attn_implementation="eager"))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 1:  # RMSNorm weights of 1 would hide a layout error
                p.add_(0.1 * torch.randn_like(p))
    return m.eval()


def model_section(folder, **extra):
    return dict({"type": "llama", "from_pretrained": folder, "block_size": T}, **extra)


def check_logits(model, seqs, source, what):
    prompts = [s[:n] for s in seqs for n in range(1, len(s) + 1)]
    arg = ";".join(",".join(str(t) for t in p) for p in prompts)
    rows = [json.loads(line) for line in run(["forward", *source, "--tokens", arg]).stdout.splitlines()]
    worst = worst_loss = 0.0
    for prompt, row in zip(prompts, rows):
        ids = torch.tensor([prompt])
        with torch.no_grad():  # the loss with the aux term where the config has one
            out = model(ids, labels=ids if len(prompt) >= 2 else None)
        ref = out.logits[0].double()
        worst = max(worst, (torch.tensor(row["logits"], dtype=torch.float64) - ref[-1]).abs().max().item())
        if len(prompt) >= 2:
            worst_loss = max(worst_loss, abs(out.loss.item() - row["loss"]))
    if len(rows) != len(prompts) or not (worst <= TOL and worst_loss <= TOL):
        fail("%s: dscore's logits differ from transformers' by %.3g (loss by %.3g), tolerance %g"
             % (what, worst, worst_loss, TOL))
    print("check_moe_models_logits %s: %d prompts, max |logit diff| %.2e, max |loss diff| %.2e"
          % (what, len(prompts), worst, worst_loss))


def sgd_step(folder, name, lr, extra):
    """One SGD step at lr from the folder on the batch in batch.bin: (step-1 loss, weights, ckpt)."""
    ckpt = path(name + "_ckpt")
    write_json(path(name + ".json"), {
        "train_batch_size": 2, "train_steps": 1, "seed": 11, "gradient_clipping": 0.0,
        "optimizer": {"type": "SGD", "params": {"lr": lr}},
        "model": model_section(folder, **extra),
        "data": {"type": "tokens", "path": path("batch.bin"), "shuffle": False},
        "checkpoint_dir": ckpt, "save_interval": 1})
    out = run(["run", "--config", path(name + ".json")]).stdout
    losses = [float(line.split("| loss ")[1].split()[0]) for line in out.splitlines()
              if line.startswith("step 1/1")]
    if len(losses) != 1:
        fail("no step 1 loss in:\n" + out)
    run(["zero-to-fp32", ckpt, path(name + "_fp32")])
    return losses[0], load_file(path(name + "_fp32", "model.safetensors")), ckpt


def torch_gradients(family, model):
    """transformers' gradients under the file's (dscore's) names."""
    prefix, names, router, width = FAMILIES[family][3:]
    gate, up, down = names or (None, None, None)  # a dense model has no experts
    out = {}
    for name, p in model.named_parameters():
        g = p.grad.detach().double()
        base = name.rsplit("mlp.", 1)[0] + (prefix or "")
        if name.endswith("mlp.experts.gate_up_proj"):
            for e in range(EXPERTS):
                out[base + "%d.%s.weight" % (e, gate)] = g[e, :width]
                out[base + "%d.%s.weight" % (e, up)] = g[e, width:]
        elif name.endswith("mlp.experts.down_proj"):
            for e in range(EXPERTS):
                out[base + "%d.%s.weight" % (e, down)] = g[e]
        elif name.endswith("mlp.gate.weight"):
            out[name.rsplit("mlp.", 1)[0] + router] = g
        else:
            out[name] = g
    return out


def check_gradients(family, folder, model, batch, what, extra):
    loss0, w0, ckpt = sgd_step(folder, what + "_lr0", 0.0, extra)
    loss1, w1, _ = sgd_step(folder, what + "_lr1", 1.0, extra)
    rows = torch.tensor(batch, dtype=torch.long)
    aux = extra.get("output_router_logits", False)
    model.zero_grad()
    out = model(input_ids=rows[:, :T], output_router_logits=aux)
    loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), rows[:, 1:].reshape(-1))
    if aux:
        loss = loss + extra["router_aux_loss_coef"] * out.aux_loss
    rel = abs(loss0 - loss.item()) / abs(loss.item())
    if not (rel <= 1e-5 and loss0 == loss1):
        fail("%s: loss dscore %.7f (lr 1: %.7f), torch %.7f: relative %.1e > 1e-5"
             % (what, loss0, loss1, loss.item(), rel))
    loss.backward()
    want = torch_gradients(family, model)
    if sorted(want) != sorted(w0):
        fail("%s: dscore's tensors %s differ from transformers' %s"
             % (what, sorted(set(w0) ^ set(want)), ""))
    worst = 0.0
    for key in w0:
        got = (w0[key] - w1[key]).double()
        error = (got - want[key]).abs().max().item()
        limit = 5e-5 * want[key].abs().max().item() + 1e-7
        worst = max(worst, error / limit)
        if error > limit:
            fail("%s: gradient of %s: max |dscore - torch| %.2e > %.2e" % (what, key, error, limit))
    print("check_moe_models_gradients %s: loss %.6f (torch %.6f, relative %.1e), %d tensors, worst "
          "error %.2f of its limit" % (what, loss0, loss.item(), rel, len(w0), worst))
    return ckpt


def check_greedy(what, model, ckpt, prompt):
    generated = run(["generate", "--checkpoint", ckpt, "--prompt-tokens",
                     ",".join(map(str, prompt)), "--temperature", "0", "--max-new-tokens", "8"])
    got = [int(t) for t in generated.stdout.strip().split(",")]
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    if got != ids:
        fail("%s greedy: dscore %s, torch %s" % (what, got[len(prompt):], ids[len(prompt):]))
    print("check_moe_models_greedy %s: ok (%s)" % (what, ids[len(prompt):]))


def check_training(family, folder, seqs, stages, changed):
    exports = {}
    for stage in stages:
        ckpt = path("%s_ckpt%d" % (family, stage))
        write_json(path("train%d.json" % stage), {
            "train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
            "zero_optimization": {"stage": stage},
            "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
            "model": model_section(folder, output_router_logits=True),
            "data": {"type": "tokens", "path": path("train.bin")},
            "train_steps": 4, "checkpoint_dir": ckpt, "save_interval": 4, "seed": 7})
        run(["run", "--config", path("train%d.json" % stage), "-n", "2"])
        out = path("%s_export%d" % (family, stage))
        run(["export-hf", ckpt, out])
        loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
        if not isinstance(loaded, FAMILIES[family][1]):
            fail("transformers loaded the %s export as %s" % (family, type(loaded).__name__))
        check_logits(loaded, seqs, ["--checkpoint", ckpt], "%s stage %d export" % (family, stage))
        exports[stage] = load_file(os.path.join(out, "model.safetensors"))
    before = load_file(os.path.join(folder, "model.safetensors"))
    first = exports[stages[0]]
    if changed not in first or (first[changed] - before[changed]).abs().max().item() == 0:
        fail("training did not change " + changed)
    for stage in stages[1:]:
        diff = max((first[k] - exports[stage][k]).abs().max().item() for k in first)
        if diff > 1e-6:
            fail("stages %d and %d trained different weights (max diff %.3g)" % (stages[0], stage, diff))
        print("check_moe_models_stages %s: stage %d and %d exports agree (max diff %.2e)"
              % (family, stages[0], stage, diff))


def check_scratch(seqs):
    model = dict(type="llama", block_size=T, **FAMILIES["mixtral"][2])
    write_json(path("scratch.json"), {
        "train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
        "model": model, "data": {"type": "tokens", "path": path("train.bin")},
        "train_steps": 2, "checkpoint_dir": path("scratch_ckpt"), "save_interval": 2})
    run(["run", "--config", path("scratch.json")])
    run(["export-hf", path("scratch_ckpt"), path("scratch_export")])
    loaded = AutoModelForCausalLM.from_pretrained(path("scratch_export"), dtype=torch.float32).eval()
    if not isinstance(loaded, MixtralForCausalLM):
        fail("transformers loaded the scratch export as %s" % type(loaded).__name__)
    check_logits(loaded, seqs[:1], ["--checkpoint", path("scratch_ckpt")], "scratch export")


def expect_error(what, folder_edit, needles):
    d = path("bad_" + what.replace(" ", "_"))
    shutil.copytree(path("mixtral"), d)
    cfg = json.load(open(os.path.join(d, "config.json")))
    folder_edit(cfg)
    write_json(os.path.join(d, "config.json"), cfg)
    write_json(path("bad.json"), {"train_batch_size": 1,
                                  "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
                                  "model": model_section(d)})
    r = run(["forward", "--config", path("bad.json"), "--tokens", "1,2"], ok=False)
    text = r.stdout + r.stderr
    missing = [n for n in needles if n not in text]
    if r.returncode == 0 or missing:
        fail("%s: exit %d, message lacks %s:\n%s" % (what, r.returncode, missing, text))
    print("check_moe_models_error %s: ok (%s)" % (what, text.strip().splitlines()[-1][:160]))


def check_family(family, seqs, tokens, batch):
    model = tiny_model(family)
    folder = path(family)
    model.save_pretrained(folder)
    prefix, names = FAMILIES[family][3:5]
    if prefix:
        expert = "model.layers.1.%s3.%s.weight" % (prefix, names[2])
        if expert not in load_file(os.path.join(folder, "model.safetensors")).keys():
            fail("save_pretrained did not write per-expert tensors (no %s)" % expert)
    write_json(path(family + "_forward.json"), {
        "train_batch_size": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "model": model_section(folder)})
    check_logits(model, seqs, ["--config", path(family + "_forward.json")], family + " from_pretrained")
    ckpt = check_gradients(family, folder, model, batch, family + "_plain", {})
    if prefix:
        ckpt = check_gradients(family, folder, model, batch, family + "_aux",
                               {"output_router_logits": True, "router_aux_loss_coef": 0.5})
    check_greedy(family, model, ckpt, seqs[0][:5])
    return folder


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    seqs = [torch.randint(0, VOCAB, (T,)).tolist() for _ in range(2)]
    tokens = torch.randint(0, VOCAB, (2 * T + 1,)).tolist()
    token_shard(path("batch.bin"), tokens)
    batch = [tokens[0:T + 1], tokens[T:2 * T + 1]]  # the data loader's two samples
    token_shard(path("train.bin"), torch.randint(0, VOCAB, (16 * T + 1,)).tolist())
    for family in FAMILIES:
        folder = check_family(family, seqs, tokens, batch)
        if family == "mixtral":
            check_training(family, folder, seqs, (2, 3),
                           "model.layers.1.block_sparse_moe.experts.2.w2.weight")
        elif family == "qwen3_moe":
            check_training(family, folder, seqs, (3,), "model.layers.2.mlp.experts.1.down_proj.weight")
        elif family == "qwen2_moe":
            check_training(family, folder, seqs, (2,), "model.layers.1.mlp.shared_expert_gate.weight")
    check_scratch(seqs)
    expect_error("jitter", lambda c: c.update(router_jitter_noise=0.1), ["router_jitter_noise"])
    expect_error("window", lambda c: c.update(sliding_window=8), ["sliding_window", "block_size"])
    print("check_moe_models: all passed")


if __name__ == "__main__":
    main()
