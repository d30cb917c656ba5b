"""`dscore generate` against transformers' generate() and its logits
processors.

transformers builds a tiny random GPT-2 (2 layers, n_embd 64, 4 heads,
vocab 300) and a tiny random Llama (grouped-query attention: 4 heads, 2
key/value heads; tied embeddings) and saves them with save_pretrained.
dscore reads each folder (`generate --config`, from_pretrained). Then:
  (a) greedy: for 5 prompts of 3 to 11 tokens, the 24 tokens of
      model.generate(do_sample=False) (each prompt alone, and all five as
      one left-padded batch) equal dscore's, with the KV cache in batches
      of 2 (ragged prefills, continuous batching), without it
      (--no-kv-cache), and one prompt at a time (--prompt-tokens);
  (b) sampling: 12000 first tokens dscore draws (different seeds) with a
      temperature, top-k, top-p and a repetition penalty follow the
      distribution transformers' RepetitionPenaltyLogitsProcessor,
      TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper make of
      the model's logits: no token they remove is drawn, and Pearson's
      chi-square over the kept ones stays below its p = 1e-4 critical value.
Prints check_* lines; exits non-zero on the first failure.
Usage: python check_generation.py <dscore binary> <scratch dir>
"""
import json
import math
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig,  # noqa: E402
                          LlamaForCausalLM)
from transformers.generation.logits_process import (  # noqa: E402
    RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
    TopPLogitsWarper)

DSCORE = os.path.abspath(sys.argv[1])
SCRATCH = os.path.abspath(sys.argv[2])
VOCAB, T, NEW = 300, 64, 24
PROMPTS = [[5, 17, 3], [101, 7, 7, 250, 33, 9, 12, 80, 2, 44, 61], [299, 0, 18, 40, 40],
           [8, 9], [120, 121, 122, 123, 124, 125, 126]]

torch.manual_seed(0)
torch.set_num_threads(1)


def fail(msg):
    print("check_generation FAILED: " + msg)
    sys.exit(1)


def path(*parts):
    return os.path.join(SCRATCH, *parts)


def run(args):
    r = subprocess.run([DSCORE] + args, capture_output=True, text=True, cwd=SCRATCH)
    if r.returncode != 0:
        fail("dscore %s exited %d:\n%s\n%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def save(model, name, model_type):
    folder = path(name)
    model.save_pretrained(folder)
    config = {"train_batch_size": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
              "model": {"type": model_type, "from_pretrained": folder, "block_size": T}}
    with open(path(name + ".json"), "w") as f:
        json.dump(config, f)
    return path(name + ".json")


def tiny_models():
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=T, n_embd=64, n_layer=2,
                                      n_head=4)).eval()
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=176,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=T,
                                         tie_word_embeddings=True)).eval()
    with torch.no_grad():
        for m in (gpt2, llama):
            for p in m.parameters():  # sharper logits: greedy choices not near ties
                p.mul_(3.0) if p.dim() >= 2 else p.add_(0.1 * torch.randn_like(p))
            m.generation_config.eos_token_id = None  # 24 tokens each, as dscore's ids
            m.generation_config.pad_token_id = 0
    return [("gpt2", gpt2, save(gpt2, "gpt2", "gpt2")),
            ("llama", llama, save(llama, "llama", "llama"))]


def hf_greedy(model):
    alone = []
    for p in PROMPTS:
        with torch.no_grad():
            # An explicit mask: without one generate() masks prompt tokens equal to the pad id.
            out = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 max_new_tokens=NEW, do_sample=False)
        alone.append(out[0, len(p):].tolist())
    # All five as one batch, left-padded with an attention mask.
    width = max(len(p) for p in PROMPTS)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False)
    batched = [row[width:].tolist() for row in out]
    return alone, batched


def dscore_batch(config, extra, lines):
    prompts = path("prompts.jsonl")
    with open(prompts, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    out = run(["generate", "--config", config, "--prompts-file", prompts] + extra).stdout
    rows = sorted((json.loads(line) for line in out.splitlines()), key=lambda r: r["index"])
    return rows


def check_greedy(name, model, config):
    alone, batched = hf_greedy(model)
    if alone != batched:
        print("check_generation_note %s: transformers' left-padded batch differs from its "
              "prompts alone in %d of 5" % (name, sum(a != b for a, b in zip(alone, batched))))
    lines = [{"prompt_tokens": p} for p in PROMPTS]
    common = ["--temperature", "0", "--max-new-tokens", str(NEW)]
    for what, extra in [("kv cache, batches of 2", ["--batch-size", "2"]),
                        ("no kv cache, batches of 5", ["--batch-size", "5", "--no-kv-cache"]),
                        ("2 tensor-parallel ranks, kv cache", ["--batch-size", "3", "-n", "2"])]:
        rows = dscore_batch(config, common + extra, lines)
        got = [r["tokens"] for r in rows]
        if got != alone:
            fail("%s greedy (%s): dscore %s != transformers %s" % (name, what, got, alone))
        print("check_generation_greedy %s (%s): 5 prompts x %d tokens equal transformers' "
              "generate(do_sample=False)" % (name, what, NEW))
    for p, want in zip(PROMPTS[:2], alone):
        out = run(["generate", "--config", config, "--prompt-tokens", ",".join(map(str, p))]
                  + common).stdout.strip()
        got = [int(t) for t in out.split(",")][len(p):]
        if got != want:
            fail("%s greedy --prompt-tokens: dscore %s != transformers %s" % (name, got, want))
    print("check_generation_greedy %s (--prompt-tokens): equal" % name)


def check_sampling(name, model, config):
    prompt = PROMPTS[1]
    temperature, top_k, top_p, penalty, draws = 0.7, 12, 0.85, 1.3, 12000
    with torch.no_grad():
        scores = model(torch.tensor([prompt])).logits[:, -1, :].float()
    ids = torch.tensor([prompt])
    for processor in [RepetitionPenaltyLogitsProcessor(penalty), TemperatureLogitsWarper(temperature),
                      TopKLogitsWarper(top_k), TopPLogitsWarper(top_p)]:
        scores = processor(ids, scores)
    want = torch.softmax(scores, dim=-1)[0].double()
    lines = [{"prompt_tokens": prompt, "seed": 1000 + i} for i in range(draws)]
    rows = dscore_batch(config, ["--temperature", str(temperature), "--top-k", str(top_k),
                                 "--top-p", str(top_p), "--repetition-penalty", str(penalty),
                                 "--max-new-tokens", "1", "--batch-size", "64"], lines)
    counts = torch.zeros(VOCAB, dtype=torch.float64)
    for r in rows:
        counts[r["tokens"][0]] += 1
    removed = [t for t in range(VOCAB) if want[t] == 0 and counts[t] > 0]
    if removed:
        fail("%s sampling: dscore drew tokens transformers' warpers remove: %s" % (name, removed))
    # Pearson's chi-square over the kept tokens against its critical value at
    # p = 1e-4 (Wilson-Hilferty: z = 3.719), so an exact sampler fails one
    # run in 10000.
    kept = [t for t in range(VOCAB) if want[t] > 0]
    chi2 = sum((counts[t].item() - draws * want[t].item()) ** 2 / (draws * want[t].item())
               for t in kept)
    df = len(kept) - 1
    limit = df * (1 - 2 / (9 * df) + 3.719 * math.sqrt(2 / (9 * df))) ** 3
    tv = 0.5 * (counts / draws - want).abs().sum().item()
    if chi2 > limit:
        fail("%s sampling: chi-square %.1f over %d kept tokens exceeds %.1f (p = 1e-4); total "
             "variation %.4f" % (name, chi2, len(kept), limit, tv))
    print("check_generation_sampling %s: %d draws over %d kept tokens, chi-square %.1f "
          "(limit %.1f at p = 1e-4), total variation %.4f" % (name, draws, len(kept), chi2, limit, tv))


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    for name, model, config in tiny_models():
        check_greedy(name, model, config)
        check_sampling(name, model, config)


if __name__ == "__main__":
    main()
