"""dscore's "llama" model with from_pretrained, and `dscore export-hf` of a
llama, against transformers' LlamaForCausalLM.

transformers (5.x: config.json carries "rope_parameters") builds tiny random
Llamas (2 layers, hidden 64, 4 heads, 2 key/value heads, SwiGLU 176, vocab
300; RMSNorm weights perturbed so they matter): one untied, one tied with
Llama 3 rope scaling, and the untied one saved again in shards. Then:
  (a) logits: `dscore forward --config` (the folder's weights, block_size 32)
      gives every prefix's last-token logits and loss; they equal
      transformers' in fp32 within 2e-5;
  (b) training: 4 AdamW steps at `-n 2`, ZeRO stages 2 and 3, from the
      folder; export-hf; AutoModelForCausalLM loads the export and its
      logits equal `dscore forward --checkpoint`'s; stages 2 and 3 agree;
  (c) a llama trained from scratch (no folder, Llama 3 rope scaling)
      exports a config.json transformers reads, with equal logits;
  (d) bad input: an unsupported rope_type, an architecture key set beside
      from_pretrained, a tensor of the wrong shape, a config.json that is
      not a Llama: each a non-zero exit naming the file, key or tensor.
Prints check_* lines; exits non-zero on the first failure.
Usage: python check_llama_pretrained.py <dscore binary> <scratch dir>
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
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

DSCORE = os.path.abspath(sys.argv[1])
SCRATCH = os.path.abspath(sys.argv[2])
T, VOCAB, TOL = 32, 300, 2e-5
SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             rope_theta=10000.0, rms_norm_eps=1e-5)
LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}

torch.manual_seed(0)
torch.set_num_threads(1)


def fail(msg):
    print("check_llama_pretrained FAILED: " + msg)
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


def tiny_llama(**extra):
    m = LlamaForCausalLM(LlamaConfig(**SHAPE, **extra))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 1:  # RMSNorm weights of 1 would hide a layout error
                p.add_(0.1 * torch.randn_like(p))
    return m.eval()


def model_section(folder):
    return {"type": "llama", "from_pretrained": folder, "block_size": T}


def forward_config(model):
    return {"train_batch_size": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
            "model": model}


def check_logits(model, seqs, source, what):
    prompts = [s[:n] for s in seqs for n in range(1, len(s) + 1)]
    arg = ";".join(",".join(str(t) for t in p) for p in prompts)
    rows = [json.loads(line) for line in run(["forward", *source, "--tokens", arg]).stdout.splitlines()]
    worst = worst_loss = 0.0
    for prompt, row in zip(prompts, rows):
        with torch.no_grad():
            ref = model(torch.tensor([prompt])).logits[0].double()
        worst = max(worst, (torch.tensor(row["logits"], dtype=torch.float64) - ref[-1]).abs().max().item())
        if len(prompt) >= 2:
            loss = torch.nn.functional.cross_entropy(ref[:-1], torch.tensor(prompt[1:])).item()
            worst_loss = max(worst_loss, abs(loss - row["loss"]))
    if len(rows) != len(prompts) or not (worst <= TOL and worst_loss <= TOL):
        fail("%s: dscore's logits differ from transformers' by %.3g (loss by %.3g), tolerance %g"
             % (what, worst, worst_loss, TOL))
    print("check_llama_pretrained_logits %s: %d prompts, max |logit diff| %.2e, max |loss diff| %.2e"
          % (what, len(prompts), worst, worst_loss))


def token_shard(p, tokens):
    with open(p, "wb") as f:  # llm.c's shard: 256 int32 header, then uint16 tokens
        f.write(struct.pack("<256i", *([20240520, 1, len(tokens)] + [0] * 253)))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def check_training(folder, seqs):
    token_shard(path("train.bin"), torch.randint(0, VOCAB, (16 * T + 1,)).tolist())
    exports = {}
    for stage in (2, 3):
        ckpt = path("ckpt%d" % stage)
        write_json(path("train%d.json" % stage), {
            "train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
            "zero_optimization": {"stage": stage},
            "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
            "model": model_section(folder), "data": {"type": "tokens", "path": path("train.bin")},
            "train_steps": 4, "checkpoint_dir": ckpt, "save_interval": 4, "seed": 7})
        run(["run", "--config", path("train%d.json" % stage), "-n", "2"])
        out = path("export%d" % stage)
        run(["export-hf", ckpt, out])
        loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
        if not isinstance(loaded, LlamaForCausalLM):
            fail("transformers loaded the export as %s" % type(loaded).__name__)
        check_logits(loaded, seqs, ["--checkpoint", ckpt], "stage %d export" % stage)
        exports[stage] = load_file(os.path.join(out, "model.safetensors"))
    before = load_file(os.path.join(folder, "model.safetensors"))
    name = "model.layers.0.self_attn.k_proj.weight"
    if (exports[2][name] - before[name]).abs().max().item() == 0:
        fail("training did not change " + name)
    diff = max((exports[2][k] - exports[3][k]).abs().max().item() for k in exports[2])
    if diff > 1e-6:
        fail("stages 2 and 3 trained different weights (max diff %.3g)" % diff)
    print("check_llama_pretrained_stages: stage 2 and 3 exports agree (max diff %.2e)" % diff)


def check_scratch(seqs):
    model = dict(type="llama", block_size=T, tie_word_embeddings=True, rope_scaling=LLAMA3,
                 **{k: v for k, v in SHAPE.items()})
    write_json(path("scratch.json"), {
        "train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
        "model": model, "data": {"type": "tokens", "path": path("train.bin")},
        "train_steps": 2, "checkpoint_dir": path("scratch_ckpt"), "save_interval": 2})
    run(["run", "--config", path("scratch.json")])
    run(["export-hf", path("scratch_ckpt"), path("scratch_export")])
    loaded = AutoModelForCausalLM.from_pretrained(path("scratch_export"), dtype=torch.float32).eval()
    check_logits(loaded, seqs[:1], ["--checkpoint", path("scratch_ckpt")], "scratch export (llama3 rope)")


def expect_error(what, model, needles):
    write_json(path("bad.json"), forward_config(model))
    r = run(["forward", "--config", path("bad.json"), "--tokens", "1,2"], ok=False)
    text = r.stdout + r.stderr
    missing = [n for n in needles if n not in text]
    if r.returncode == 0 or missing:
        fail("%s: exit %d, message lacks %s:\n%s" % (what, r.returncode, missing, text))
    print("check_llama_pretrained_error %s: ok (%s)" % (what, text.strip().splitlines()[-1][:160]))


def check_bad(folder):
    d = path("bad_rope")
    shutil.copytree(folder, d)
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["rope_parameters"] = {"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0}
    write_json(os.path.join(d, "config.json"), cfg)
    expect_error("unsupported rope_type", model_section(d), ["yarn", "rope_type"])

    expect_error("architecture key beside from_pretrained", dict(model_section(folder), hidden_size=128),
                 ["hidden_size", "from_pretrained", "config.json"])

    d = path("bad_shape")
    shutil.copytree(folder, d)
    st = os.path.join(d, "model.safetensors")
    tensors = load_file(st)
    tensors["model.layers.1.self_attn.v_proj.weight"] = torch.zeros(64, 64)
    save_file(tensors, st, metadata={"format": "pt"})
    expect_error("wrong shape", model_section(d), [st, "model.layers.1.self_attn.v_proj.weight"])

    d = path("bad_type")
    shutil.copytree(folder, d)
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["model_type"] = "mistral"
    write_json(os.path.join(d, "config.json"), cfg)
    expect_error("not a Llama", model_section(d), [os.path.join(d, "config.json"), "mistral"])


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    seqs = [torch.randint(0, VOCAB, (T,)).tolist() for _ in range(2)]
    untied = tiny_llama()
    untied.save_pretrained(path("untied"))
    write_json(path("untied.json"), forward_config(model_section(path("untied"))))
    check_logits(untied, seqs, ["--config", path("untied.json")], "untied GQA")

    tied = tiny_llama(tie_word_embeddings=True, rope_scaling=LLAMA3)
    tied.save_pretrained(path("tied"))
    write_json(path("tied.json"), forward_config(model_section(path("tied"))))
    check_logits(tied, seqs, ["--config", path("tied.json")], "tied, llama3 rope")

    untied.save_pretrained(path("sharded"), max_shard_size="100KB")
    n = len([f for f in os.listdir(path("sharded")) if f.endswith(".safetensors")])
    if n < 2:
        fail("save_pretrained(max_shard_size=100KB) wrote %d file(s)" % n)
    write_json(path("sharded.json"), forward_config(model_section(path("sharded"))))
    check_logits(untied, seqs[:1], ["--config", path("sharded.json")], "%d shards" % n)

    check_training(path("untied"), seqs)
    check_scratch(seqs)
    check_bad(path("untied"))
    print("check_llama_pretrained: all passed")


if __name__ == "__main__":
    main()
