"""One rank of a DeepSpeed pipeline run (PipelineModule, 1F1B) of dscore's
mlp problem (dscore_mlp.py) on the CPU accelerator with gloo: layer l is
dscore's mlp layer l (its Linear, then tanh but after the last), the loss
dscore's MSE; DeepSpeed cuts the layers with partition_method "parameters",
as dscore's "pipeline" section does by default. Each data-parallel rank
reads the micro-batches dscore's sampler gives it (all stages of a pipeline
read the same ones). Started by check_pipeline.py with the distributed
environment set; rank 0 writes the per-step losses (train_batch's, the last
stage's mean over the micro-batches and the data-parallel ranks, broadcast
to every stage) as JSON.

Usage: ds_pipe_worker.py <result.json> <config.json>
The config is dscore's, with "pipeline": {"stages": P}.
"""
import json
import sys

import deepspeed
import torch
from deepspeed.pipe import PipelineModule

import dscore_mlp

DSCORE_ONLY = {"model", "data", "train_steps", "seed", "csv_monitor", "pipeline"}


class Layer(torch.nn.Module):
    """dscore's mlp layer l: its Linear ("layers.{l}"), then tanh unless last."""

    def __init__(self, seed, l, n_in, n_out, last):
        super().__init__()
        self.linear = dscore_mlp.Linear(seed, f"layers.{l}", n_in, n_out)
        self.last = last

    def forward(self, h):
        h = self.linear(h)
        return h if self.last else dscore_mlp._TanhLoops.apply(h)


def mse(pred, y):
    return dscore_mlp._MseLoss.apply(pred, y)


def main():
    result_path, config_path = sys.argv[1:3]
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    torch.set_num_threads(1)
    with open(config_path) as f:
        config = json.load(f)
    m, seed, steps = config["model"], config["seed"], config["train_steps"]
    dims = [m["input_dim"]] + [m["hidden_dim"]] * m["n_hidden_layers"] + [m["output_dim"]]
    layers = [Layer(seed, l, dims[l], dims[l + 1], l + 2 == len(dims)) for l in range(len(dims) - 1)]
    module = PipelineModule(layers=layers, loss_fn=mse, num_stages=config["pipeline"]["stages"],
                            partition_method="parameters")
    ds_config = {k: v for k, v in config.items() if k not in DSCORE_ONLY}
    engine, _, _, _ = deepspeed.initialize(model=module, model_parameters=module.parameters(),
                                           config=ds_config)
    teacher = dscore_mlp.Teacher(m["teacher_seed"], m["input_dim"], m["output_dim"])
    train, micro = engine.train_batch_size(), engine.train_micro_batch_size_per_gpu()
    gas = engine.gradient_accumulation_steps()
    dp_rank, dp_world = engine.grid.get_data_parallel_rank(), engine.grid.get_data_parallel_world_size()

    def micro_batches(step):
        for k in range(gas):
            first = dscore_mlp.micro_batch_first_sample(step, k, dp_rank, dp_world, train, micro)
            yield dscore_mlp.synthetic_samples(seed, teacher, first, micro)

    losses = [engine.train_batch(data_iter=micro_batches(step)).item() for step in range(steps)]
    if torch.distributed.get_rank() == 0:
        with open(result_path, "w") as f:
            json.dump({"losses": losses, "deepspeed": deepspeed.__version__, "parts": [int(p) for p in module.parts],
                       "optimizer": type(engine.optimizer).__name__}, f)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
