"""One rank of a DeepSpeed run that trains a Hugging Face LlamaForCausalLM (or
MixtralForCausalLM: any causal LM transformers' Auto class builds) on
an llm.c token shard the way `dscore run` reads it (data.shuffle false):
global sample i is chunk i mod N, tokens [k*T, k*T + T + 1); micro-batch m
of rank r at step s starts at sample s*B + m*micro*W + r*micro
(core/data/sampler.h). Started by check_llama_import.py with the
distributed environment set; rank 0 writes the per-step losses as JSON.
Under AutoTP the ranks of a tensor-parallel group read the same samples
(rank and world above are then the data-parallel ones), and under Ulysses
(sequence_parallel_size) those of a sequence-parallel group, each computing
its slice of the positions.

Usage: ds_llama_worker.py <result.json> <hf folder> <token shard> <T> <steps> <save at> <save dir> <ds_config.json>
"""
import json
import sys

import deepspeed
import numpy as np
import torch
from transformers import AutoModelForCausalLM


def accept_autoep_lookups():
    """AutoEP (DeepSpeed 0.19.8, module_inject/auto_ep_presets/base.py) asks
    transformers' output-capturing registry for a name with a default, as of
    a dict; transformers 5.23's _CanRecordRegistry.get takes a model and no
    default (a TypeError). A name and a default are answered as dict.get
    answers them; a model's lookup is unchanged."""
    from transformers.utils import output_capturing
    registry = output_capturing._CanRecordRegistry
    by_model = registry.get

    def get(self, key, *default):
        return dict.get(self, key, *default) if isinstance(key, str) else by_model(self, key)

    registry.get = get


def read_shard(path):
    """The tokens of an llm.c shard (header of 256 int32, then uint16 tokens)."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        return np.frombuffer(f.read(), dtype=np.uint16)[:header[2]].astype(np.int64)


def sample_rows(tokens, T, first, count):
    """Samples first .. first + count - 1 as `dscore run` reads them: sample k
    is tokens [j*T, j*T + T + 1), j = k mod the samples in the shard."""
    chunks = (len(tokens) - 1) // T
    return torch.tensor(np.stack([tokens[(k % chunks) * T:(k % chunks) * T + T + 1]
                                  for k in range(first, first + count)]))


def sequence_slice_loss(engine, rows, T, sp, sp_rank, mpu):
    """This rank's slice of every sample (positions [r T/sp, (r+1) T/sp)):
    its share of the whole samples' mean cross-entropy (the summed losses of
    its targets over all micro x T of them). DeepSpeed sums the ranks'
    gradients over the sequence group (and averages over world / sp), so the
    shares add up to the mean's gradient."""
    local = T // sp
    cols = slice(sp_rank * local, (sp_rank + 1) * local)
    positions = torch.arange(T)[cols].unsqueeze(0).expand(rows.shape[0], -1)
    logits = engine(input_ids=rows[:, :T][:, cols], position_ids=positions).logits
    targets = rows[:, 1:T + 1][:, cols]
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1), reduction="sum") / (rows.shape[0] * T)


def moe_loss(engine, rows, T, config):
    """The samples' mean cross-entropy of their T targets from T inputs, plus
    router_aux_loss_coef times the load-balancing loss of those inputs'
    routes (output_router_logits), as dscore computes an MoE llama's: given
    the T + 1 tokens and labels, transformers would route the last one too
    and count it in the load-balancing loss."""
    out = engine(input_ids=rows[:, :T])
    loss = torch.nn.functional.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]),
                                             rows[:, 1:T + 1].reshape(-1))
    if getattr(config, "output_router_logits", False):
        loss = loss + config.router_aux_loss_coef * out.aux_loss
    return loss


def main():
    result_path, folder, shard, T, steps, save_at, save_dir, config_path = sys.argv[1:9]
    T, steps, save_at = int(T), int(steps), int(save_at)
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    torch.set_num_threads(1)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    tokens = read_shard(shard)
    with open(config_path) as f:
        ds_config = json.load(f)
    # Ulysses (sequence_parallel_size): DeepSpeed's ALST attention for Hugging
    # Face models (UlyssesSPAttentionHF over sdpa) and its sequence-parallel
    # groups of consecutive ranks, which read the same samples.
    sp = ds_config.get("sequence_parallel_size", 1) or 1
    mpu, attention = None, "eager"
    if sp > 1:
        from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF
        mpu = UlyssesSPAttentionHF.register_with_transformers(
            model_name_or_path=folder, core_attn_implementation="sdpa", sequence_parallel_size=sp,
            micro_batch_size=ds_config["train_micro_batch_size_per_gpu"], seq_length=T,
            seq_length_is_variable=False)
        attention = "sdpa"
    if ds_config.get("expert_parallel", {}).get("enabled"):
        accept_autoep_lookups()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 attn_implementation=attention)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config,
                                           mpu=mpu)
    # int(): under sequence_parallel_size DeepSpeed 0.19.8 divides the world
    # size by it as a float, and its gradient_accumulation_steps comes out
    # a float (2.0).
    micro, gas = engine.train_micro_batch_size_per_gpu(), int(engine.gradient_accumulation_steps())
    # AutoTP (tensor_parallel.autotp_size): groups of consecutive ranks hold
    # the parts of one replica and read the same samples.
    tp = ds_config.get("tensor_parallel", {}).get("autotp_size", 0) or 1
    sp_rank = rank % sp
    rank, world = rank // (tp * sp), world // (tp * sp)
    batch = micro * gas * world
    losses, mean_losses = [], []
    for step in range(steps):
        rank_loss = 0.0
        for m in range(gas):
            first = step * batch + m * micro * world + rank * micro
            rows = sample_rows(tokens, T, first, micro)
            if sp > 1:
                loss = sequence_slice_loss(engine, rows, T, sp, sp_rank, mpu)
            elif getattr(model.config, "num_local_experts", 0):
                loss = moe_loss(engine, rows, T, model.config)
            else:
                loss = engine(input_ids=rows, labels=rows).loss
            engine.backward(loss)
            if sp > 1:  # the samples' loss: the sum of the slices' shares
                loss = loss.detach().clone()
                torch.distributed.all_reduce(loss, group=mpu.get_sequence_parallel_group())
            rank_loss += loss.item() / gas
            engine.step()
        losses.append(rank_loss)
        mean = torch.tensor([rank_loss], dtype=torch.float64)
        torch.distributed.all_reduce(mean)
        mean_losses.append(mean.item() / torch.distributed.get_world_size())
        if step + 1 == save_at:
            engine.save_checkpoint(save_dir)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"losses": losses, "mean_losses": mean_losses, "deepspeed": deepspeed.__version__}, f)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
