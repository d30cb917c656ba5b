"""dscore's "gpt2" model (from_pretrained) and `dscore export-hf` against
transformers' GPT2LMHeadModel.

transformers builds a tiny random GPT-2 (3 layers, n_embd 64, 4 heads, vocab
300, n_positions 64; LayerNorms perturbed so they matter) and saves it with
save_pretrained: once as one model.safetensors, once sharded, once in bf16.
Then:
  (a) logits: `dscore forward --config` (the folder's weights, block_size 32)
      gives every prefix's last-token logits and loss; they equal
      transformers' in fp32 within 2e-5 (absolute, logits of size ~1);
  (b) gradients: one SGD step (lr 100) at `dscore run`, exported with
      export-hf: (before - after) / lr equals torch autograd's gradient of the
      same batch's mean loss within 1e-4 of the largest entry, for wte (tied
      LM head), wpe, a Conv1D weight (transposed twice), a bias and ln_f;
  (c) training: 4 AdamW steps at `-n 2`, ZeRO stages 2 and 3, from the
      folder; export-hf (single, sharded, bf16); AutoModelForCausalLM loads
      each, its logits equal `dscore forward --checkpoint`'s (fp32: 2e-5;
      bf16 weights: 0.05), stages 2 and 3 agree, tokenizer side files copied;
      each rank of a ZeRO-3 run reads only its shards (strace, when present);
      dscore's own "gpt" trained from scratch exports and loads the same way;
  (e) tensor parallelism (tensor_parallel.autotp_size 2, each rank reading
      its slices of the folder): (b)'s gradients at TP=2 against torch
      autograd, and 4 AdamW steps exported whole from the parts' checkpoint,
      loaded by transformers with dscore's logits, equal to (c)'s stage-2
      export within 1e-4;
  (d) bad folders: missing config.json, a truncated safetensors file, a
      tensor of the wrong shape, unsupported config options: each a non-zero
      exit and a message naming the file, tensor or option.
Prints check_* lines; exits non-zero on the first failure.
Usage: python check_gpt2.py <dscore binary> <scratch dir>
"""
import copy
import json
import os
import shutil
import struct
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel  # noqa: E402

DSCORE = os.path.abspath(sys.argv[1])
SCRATCH = os.path.abspath(sys.argv[2])
T = 32  # dscore's block_size (< n_positions: export must keep all 64 wpe rows)
VOCAB = 300
LOGIT_TOL = 2e-5
GRAD_TOL = 1e-4
# TP=2 against DP=2 after 4 AdamW steps (lr 0.003), absolute: the same
# samples summed in another order (split linears' parts; accumulation
# instead of the allreduce), which Adam magnifies where a gradient component
# is mostly rounding noise (measured 2.0e-5, under 1% of one step).
TP_TOL = 1e-4

torch.manual_seed(0)
torch.set_num_threads(1)


def fail(msg):
    print("check_gpt2 FAILED: " + msg)
    sys.exit(1)


def path(*parts):
    return os.path.join(SCRATCH, *parts)


def run(args, ok=True, **kw):
    r = subprocess.run([DSCORE] + args, capture_output=True, text=True, **kw)
    if ok and r.returncode != 0:
        fail("dscore %s exited %d:\n%s\n%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def write_json(p, obj):
    with open(p, "w") as f:
        json.dump(obj, f, indent=1)


def tiny_model():
    cfg = GPT2Config(n_layer=3, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=1, eos_token_id=2)
    m = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 1:  # LayerNorm weights 1 and biases 0 would hide layout errors
                p.add_(0.1 * torch.randn_like(p))
    return m.eval()


def hf_logits(model, seq):
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0].double()


def dscore_forward(prompts, *source):
    arg = ";".join(",".join(str(t) for t in p) for p in prompts)
    out = run(["forward", *source, "--tokens", arg]).stdout
    return [json.loads(line) for line in out.splitlines()]


def check_prefix_logits(model, seqs, source, tol, what):
    prompts = [s[:n] for s in seqs for n in range(1, len(s) + 1)]
    rows = dscore_forward(prompts, *source)
    worst = 0.0
    worst_loss = 0.0
    for prompt, row in zip(prompts, rows):
        ref = hf_logits(model, prompt)
        got = torch.tensor(row["logits"], dtype=torch.float64)
        worst = max(worst, (got - ref[len(prompt) - 1]).abs().max().item())
        if len(prompt) >= 2:
            loss = torch.nn.functional.cross_entropy(ref[:-1], torch.tensor(prompt[1:])).item()
            worst_loss = max(worst_loss, abs(loss - row["loss"]))
    if not (worst <= tol and worst_loss <= tol):
        fail("%s: dscore's logits differ from transformers' by %.3g (loss by %.3g), tolerance %g"
             % (what, worst, worst_loss, tol))
    print("check_gpt2_logits %s: %d prompts, max |logit diff| %.2e, max |loss diff| %.2e (tol %g)"
          % (what, len(prompts), worst, worst_loss, tol))


def token_shard(p, tokens):
    # llm.c's shard: 256 int32 header {20240520, 1, count}, then uint16 tokens.
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(p, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def train_config(folder, data, ckpt, optimizer, steps, stage, batch):
    return {
        "train_batch_size": batch, "train_micro_batch_size_per_gpu": batch // 2 if stage else batch,
        "zero_optimization": {"stage": stage},
        "optimizer": optimizer,
        "model": {"type": "gpt2", "from_pretrained": folder, "block_size": T},
        "data": {"type": "tokens", "path": data},
        "train_steps": steps, "checkpoint_dir": ckpt, "save_interval": steps, "seed": 7,
    }


def forward_config(folder):
    return {"train_batch_size": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
            "model": {"type": "gpt2", "from_pretrained": folder, "block_size": T}}


def check_gradients(model, folder, tp=1):
    # Two chunks of T + 1 tokens: one global batch of 2 is the whole file.
    # tp 2: the model split over 2 ranks (tensor_parallel.autotp_size), its
    # checkpoint's parts exported whole.
    tokens = torch.randint(0, VOCAB, (2 * T + 1,)).tolist()
    token_shard(path("grad.bin"), tokens)
    lr = 100.0
    suffix = "" if tp == 1 else "_tp%d" % tp
    cfg = train_config(folder, path("grad.bin"), path("grad_ckpt" + suffix),
                       {"type": "SGD", "params": {"lr": lr}}, 1, 0, 2)
    cfg["gradient_clipping"] = 0  # DeepSpeed 0.19's default 1.0 would scale this gradient
    if tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": tp}
    write_json(path("grad%s.json" % suffix), cfg)
    run(["run", "--config", path("grad%s.json" % suffix), "-n", str(tp)], cwd=SCRATCH)
    run(["export-hf", path("grad_ckpt" + suffix), path("grad_export" + suffix)])
    after = load_file(path("grad_export" + suffix, "model.safetensors"))
    batch = torch.tensor([tokens[0:T + 1], tokens[T:2 * T + 1]])
    model.zero_grad()
    logits = model(batch[:, :T]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
    loss.backward()
    before = dict(model.named_parameters())
    bad = []
    for name in ["transformer.wte.weight", "transformer.wpe.weight",
                 "transformer.h.0.attn.c_attn.weight", "transformer.h.2.mlp.c_proj.weight",
                 "transformer.h.1.mlp.c_fc.bias", "transformer.ln_f.weight"]:
        ref = before[name].grad.double()
        got = (before[name].detach().double() - after[name].double()) / lr
        err = (got - ref).abs().max().item() / ref.abs().max().item()
        if err > GRAD_TOL:
            bad.append("%s (%.3g)" % (name, err))
        print("check_gpt2_gradient%s %s: max diff %.2e of max |grad| (tol %g)"
              % (suffix, name, err, GRAD_TOL))
    if bad:
        fail("gradients differ from torch autograd's (share of the largest entry): " + ", ".join(bad))


def check_training(folder, model):
    tokens = torch.randint(0, VOCAB, (16 * T + 1,)).tolist()
    token_shard(path("train.bin"), tokens)
    adamw = {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}}
    seqs = [tokens[5:5 + T], tokens[100:100 + 20]]
    exports = {}
    for stage in (2, 3):
        ckpt = path("ckpt%d" % stage)
        write_json(path("train%d.json" % stage),
                   train_config(folder, path("train.bin"), ckpt, adamw, 4, stage, 4))
        run(["run", "--config", path("train%d.json" % stage), "-n", "2"], cwd=SCRATCH)
        out = path("export%d" % stage)
        run(["export-hf", ckpt, out])
        for side in ("generation_config.json", "special_tokens_map.json"):
            if not os.path.exists(os.path.join(out, side)):
                fail("export-hf did not copy %s from the from_pretrained folder" % side)
        loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
        if not isinstance(loaded, GPT2LMHeadModel):
            fail("transformers loaded the export as %s" % type(loaded).__name__)
        check_prefix_logits(loaded, seqs, ["--checkpoint", ckpt], LOGIT_TOL,
                            "stage %d export" % stage)
        exports[stage] = load_file(os.path.join(out, "model.safetensors"))
        moved = (exports[stage]["transformer.h.0.attn.c_attn.weight"]
                 - model.transformer.h[0].attn.c_attn.weight.detach()).abs().max().item()
        if moved == 0:
            fail("stage %d: training did not change the weights" % stage)
    diff = max((exports[2][k] - exports[3][k]).abs().max().item() for k in exports[2])
    if diff > 1e-6:
        fail("stages 2 and 3 trained different weights (max diff %.3g)" % diff)
    print("check_gpt2_stages: stage 2 and 3 exports agree (max diff %.2e)" % diff)

    # Sharded and bf16 exports load too.
    run(["export-hf", path("ckpt3"), path("export_sharded"), "--max-shard-size", "150KB"])
    index = json.load(open(path("export_sharded", "model.safetensors.index.json")))
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) < 2:
        fail("--max-shard-size 150KB wrote %d shard(s)" % len(shards))
    loaded = AutoModelForCausalLM.from_pretrained(path("export_sharded"), dtype=torch.float32)
    check_prefix_logits(loaded.eval(), seqs, ["--checkpoint", path("ckpt3")], LOGIT_TOL,
                        "sharded export (%d shards)" % len(shards))
    run(["export-hf", path("ckpt3"), path("export_bf16"), "--dtype", "bf16"])
    loaded = AutoModelForCausalLM.from_pretrained(path("export_bf16"), dtype=torch.float32)
    check_prefix_logits(loaded.eval(), seqs, ["--checkpoint", path("ckpt3")], 0.05,
                        "bf16 export")
    return exports


def check_tensor_parallel(folder, model, exports):
    # (e) tensor parallelism: the gradients of a run split over 2 ranks
    # (each reading its slices of the folder) against torch autograd, and 4
    # AdamW steps at TP=2 (ZeRO 2 over each part's one data-parallel rank),
    # exported whole from the parts' checkpoint: transformers loads it with
    # `dscore forward --checkpoint`'s logits, and it equals the stage-2 run
    # of 2 data-parallel ranks on the same samples.
    check_gradients(model, folder, tp=2)
    adamw = {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}}
    cfg = train_config(folder, path("train.bin"), path("ckpt_tp"), adamw, 4, 2, 4)
    cfg["tensor_parallel"] = {"autotp_size": 2}
    write_json(path("train_tp.json"), cfg)
    run(["run", "--config", path("train_tp.json"), "-n", "2"], cwd=SCRATCH)
    run(["export-hf", path("ckpt_tp"), path("export_tp")])
    loaded = AutoModelForCausalLM.from_pretrained(path("export_tp"), dtype=torch.float32).eval()
    seqs = [torch.randint(0, VOCAB, (T,)).tolist() for _ in range(2)]
    check_prefix_logits(loaded, seqs, ["--checkpoint", path("ckpt_tp")], LOGIT_TOL, "TP=2 export")
    split = load_file(path("export_tp", "model.safetensors"))
    diff = max((split[k] - exports[2][k]).abs().max().item() for k in exports[2])
    if diff > TP_TOL:
        fail("TP=2 trained other weights than 2 data-parallel ranks (max diff %.3g)" % diff)
    print("check_gpt2_tensor_parallel: TP=2 export equals the DP=2 one within %.2e (tol %g)"
          % (diff, TP_TOL))


def check_stage3_reads(folder):
    # Each rank of a ZeRO-3 run reads only its shard of every parameter from
    # the safetensors file (plus the header): counted with strace's pread64.
    if shutil.which("strace") is None:
        print("check_gpt2_stage3_reads: skipped (no strace)")
        return
    write_json(path("reads.json"),
               train_config(folder, path("train.bin"), path("reads_ckpt"),
                            {"type": "SGD", "params": {"lr": 0.0}}, 1, 3, 4))
    traces = path("reads_trace")
    os.makedirs(traces)
    r = subprocess.run(["strace", "-ff", "-y", "-qq", "-e", "trace=pread64", "-o",
                        os.path.join(traces, "t"), DSCORE, "run", "--config", path("reads.json"),
                        "-n", "2"], capture_output=True, text=True, cwd=SCRATCH)
    if r.returncode != 0:
        fail("dscore run under strace exited %d:\n%s" % (r.returncode, r.stderr))
    weights = os.path.join(folder, "model.safetensors")
    size = os.path.getsize(weights)
    per_thread = {}
    for trace in os.listdir(traces):
        total = 0
        for line in open(os.path.join(traces, trace)):
            if weights + ">" in line and ") = " in line:
                total += int(line.rsplit("= ", 1)[1])
        if total:
            per_thread[trace] = total
    # One trace per thread: together the two ranks read the file about once
    # (each its shard and the header); reading whole tensors would be twice.
    whole = sum(per_thread.values())
    if not per_thread or whole > size * 1.05 + 4096:
        fail("a ZeRO-3 run at 2 ranks read %d bytes of the %d-byte %s: more than the file once"
             % (whole, size, weights))
    print("check_gpt2_stage3_reads: 2 ranks read %d bytes of the %d-byte model.safetensors "
          "together (each its shard, plus the header)" % (whole, size))


def check_scratch_gpt():
    # dscore's own "gpt" (random init, no folder) exports to a GPT-2 too.
    tokens = torch.randint(0, VOCAB, (8 * 16 + 1,)).tolist()
    token_shard(path("scratch.bin"), tokens)
    cfg = {"train_batch_size": 4, "train_steps": 2, "seed": 3,
           "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
           "model": {"type": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16,
                     "vocab_size": VOCAB},
           "data": {"type": "tokens", "path": path("scratch.bin")},
           "checkpoint_dir": path("scratch_ckpt"), "save_interval": 2}
    write_json(path("scratch.json"), cfg)
    run(["run", "--config", path("scratch.json")], cwd=SCRATCH)
    run(["export-hf", path("scratch_ckpt"), path("scratch_export")])
    loaded = AutoModelForCausalLM.from_pretrained(path("scratch_export"), dtype=torch.float32)
    check_prefix_logits(loaded.eval(), [tokens[:16]], ["--checkpoint", path("scratch_ckpt")],
                        LOGIT_TOL, "gpt (from scratch) export")


def expect_error(name, folder, needles):
    write_json(path("bad.json"), forward_config(folder))
    r = run(["forward", "--config", path("bad.json"), "--tokens", "1,2"], ok=False)
    if r.returncode == 0:
        fail("%s: dscore accepted the folder" % name)
    for n in needles:
        if n not in r.stderr:
            fail("%s: the error does not name %r:\n%s" % (name, n, r.stderr))
    print("check_gpt2_bad_folder %s: exit %d, %s" % (name, r.returncode,
                                                     r.stderr.strip().splitlines()[-1][:160]))


def bad_copy(src, name):
    dst = path("bad_" + name)
    shutil.copytree(src, dst)
    return dst


def check_bad_folders(folder):
    d = bad_copy(folder, "no_config")
    os.remove(os.path.join(d, "config.json"))
    expect_error("missing config.json", d, [d, "has no config.json"])

    d = bad_copy(folder, "truncated")
    st = os.path.join(d, "model.safetensors")
    os.truncate(st, os.path.getsize(st) - 1000)
    expect_error("truncated safetensors", d, [st, "truncated", "tensor "])

    d = bad_copy(folder, "wrong_shape")
    st = os.path.join(d, "model.safetensors")
    tensors = load_file(st)
    tensors["transformer.h.1.mlp.c_fc.weight"] = torch.zeros(64, 128)
    save_file(tensors, st, metadata={"format": "pt"})
    expect_error("wrong shape", d, [st, "transformer.h.1.mlp.c_fc.weight", "[64, 128]", "[64, 256]"])

    d = bad_copy(folder, "missing_tensor")
    st = os.path.join(d, "model.safetensors")
    tensors = load_file(st)
    del tensors["transformer.h.2.ln_2.bias"]
    save_file(tensors, st, metadata={"format": "pt"})
    expect_error("missing tensor", d, [st, "transformer.h.2.ln_2.bias"])

    for option, value in [("scale_attn_by_inverse_layer_idx", True),
                          ("reorder_and_upcast_attn", True), ("activation_function", "relu"),
                          ("layer_norm_epsilon", 1e-6)]:
        d = bad_copy(folder, "option_" + option)
        cfg = json.load(open(os.path.join(d, "config.json")))
        cfg[option] = value
        write_json(os.path.join(d, "config.json"), cfg)
        expect_error("unsupported " + option, d, [os.path.join(d, "config.json"), option])


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    model = tiny_model()
    folder = path("gpt2")
    model.save_pretrained(folder)
    # A tokenizer side file, as a real folder has.
    write_json(os.path.join(folder, "special_tokens_map.json"), {"eos_token": "<|endoftext|>"})
    write_json(path("pretrained.json"), forward_config(folder))
    seqs = [torch.randint(0, VOCAB, (T,)).tolist() for _ in range(2)]
    check_prefix_logits(model, seqs, ["--config", path("pretrained.json")], LOGIT_TOL,
                        "model.safetensors")

    model.save_pretrained(path("gpt2_sharded"), max_shard_size="200KB")
    n = len([f for f in os.listdir(path("gpt2_sharded")) if f.endswith(".safetensors")])
    if n < 2:
        fail("save_pretrained(max_shard_size=200KB) wrote %d file(s)" % n)
    write_json(path("sharded.json"), forward_config(path("gpt2_sharded")))
    check_prefix_logits(model, seqs[:1], ["--config", path("sharded.json")], LOGIT_TOL,
                        "%d shards" % n)

    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(path("gpt2_bf16"))
    as_bf16 = GPT2LMHeadModel.from_pretrained(path("gpt2_bf16"), dtype=torch.float32).eval()
    write_json(path("bf16.json"), forward_config(path("gpt2_bf16")))
    check_prefix_logits(as_bf16, seqs[:1], ["--config", path("bf16.json")], LOGIT_TOL,
                        "bf16 weights")

    check_gradients(model, folder)
    exports = check_training(folder, model)
    check_tensor_parallel(folder, model, exports)
    check_stage3_reads(folder)
    check_scratch_gpt()
    check_bad_folders(folder)
    print("check_gpt2: all passed")


if __name__ == "__main__":
    main()
