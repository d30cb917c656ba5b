"""One rank of a DeepSpeed pipeline run (PipelineModule, 1F1B, CPU
accelerator, gloo) of a Hugging Face LlamaForCausalLM cut as dscore's llama
cuts it: layer 0 the token embedding, layer l + 1 decoder layer l, the last
layer the final norm and the LM head; the loss is the mean cross-entropy
of next-token prediction. DeepSpeed partitions them with
partition_method "parameters", as dscore's "pipeline" section does by
default. Every stage of a data-parallel rank reads the micro-batches
`dscore run` reads (data.shuffle false, core/data/sampler.h): micro-batch m
of data-parallel rank r at step s starts at sample s*B + m*micro*W + r*micro,
sample k being tokens [k*T, k*T + T + 1) of the shard. Started by
check_pipeline_llama.py; rank 0 writes the per-step losses (train_batch's,
the last stage's mean over the micro-batches and the data-parallel ranks)
and DeepSpeed's cut as JSON.

Usage: ds_pipe_llama_worker.py <result.json> <hf folder> <token shard> <T> <steps> <stages> <ds_config.json>
"""
import json
import sys

import deepspeed
import torch
from deepspeed.pipe import PipelineModule
from transformers import LlamaForCausalLM

import ds_llama_worker


class Embedding(torch.nn.Module):
    def __init__(self, embed):
        super().__init__()
        self.embed = embed

    def forward(self, ids):
        return self.embed(ids)


class Decoder(torch.nn.Module):
    """One decoder layer with its rotary embedding and a causal mask."""

    def __init__(self, layer, rotary):
        super().__init__()
        self.layer = layer
        self.rotary = rotary

    def forward(self, h):
        T = h.shape[1]
        positions = torch.arange(T).unsqueeze(0)
        mask = torch.full((T, T), torch.finfo(h.dtype).min).triu(1)[None, None]
        out = self.layer(h, attention_mask=mask, position_ids=positions,
                         position_embeddings=self.rotary(h, positions))
        return out[0] if isinstance(out, tuple) else out


class Head(torch.nn.Module):
    def __init__(self, norm, lm_head):
        super().__init__()
        self.norm = norm
        self.lm_head = lm_head

    def forward(self, h):
        return self.lm_head(self.norm(h))


def next_token_loss(logits, labels):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def main():
    result_path, folder, shard, T, steps, stages, config_path = sys.argv[1:8]
    T, steps, stages = int(T), int(steps), int(stages)
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    torch.set_num_threads(1)
    tokens = ds_llama_worker.read_shard(shard)
    with open(config_path) as f:
        ds_config = json.load(f)
    hf = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    rotary = hf.model.rotary_emb
    layers = ([Embedding(hf.model.embed_tokens)] + [Decoder(l, rotary) for l in hf.model.layers]
              + [Head(hf.model.norm, hf.lm_head)])
    module = PipelineModule(layers=layers, loss_fn=next_token_loss, num_stages=stages,
                            partition_method="parameters")
    engine, _, _, _ = deepspeed.initialize(model=module, model_parameters=module.parameters(),
                                           config=ds_config)
    batch, micro = engine.train_batch_size(), engine.train_micro_batch_size_per_gpu()
    gas = engine.gradient_accumulation_steps()
    dp_rank, dp_world = engine.grid.get_data_parallel_rank(), engine.grid.get_data_parallel_world_size()

    def micro_batches(step):
        for m in range(gas):
            first = step * batch + m * micro * dp_world + dp_rank * micro
            rows = ds_llama_worker.sample_rows(tokens, T, first, micro)
            yield rows[:, :T].contiguous(), rows[:, 1:].contiguous()

    losses = [engine.train_batch(data_iter=micro_batches(step)).item() for step in range(steps)]
    if torch.distributed.get_rank() == 0:
        with open(result_path, "w") as f:
            json.dump({"losses": losses, "deepspeed": deepspeed.__version__,
                       "parts": [int(p) for p in module.parts]}, f)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
