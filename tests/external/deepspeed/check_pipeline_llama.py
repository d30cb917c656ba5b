"""DeepSpeed's pipeline engine as the oracle of dscore's on a transformer:
a tiny Hugging Face Llama (4 decoder layers, hidden 64, 4 query heads over
2 key/value heads, vocab 300, untied), saved by transformers, is trained
from the same folder by DeepSpeed 0.19.8's PipelineModule (1F1B, CPU
accelerator, gloo; ds_pipe_llama_worker.py) and by `dscore run` with
"from_pretrained" and "pipeline", on the same llm.c token shard in the same
order (data.shuffle false), Adam lr 1e-3, gradient clipping 1.0, ZeRO 1,
4 micro-batches of 2: 2 stages on 2 ranks, and 2 stages x 2 data-parallel
ranks on 4. The cut must be DeepSpeed's; every step's loss (the last
stage's mean over the micro-batches and the data-parallel ranks) within
1e-5 relative of DeepSpeed's, check_llama_import.py's bound for these
models (one forward pass against transformers, summed in another order).

Usage: check_pipeline_llama.py <dscore binary>
"""
import json
import os
import sys
import tempfile
import time

import check_llama_import as li
import check_pipeline as cp
import check_training as ct

T, STEPS, RTOL = 16, 10, li.RTOL
MODEL = dict(li.MODEL, num_hidden_layers=4)
BATCH = dict(li.BATCH, train_micro_batch_size_per_gpu=2, zero_optimization={"stage": 1})
RUNS = [(2, 2), (2, 4)]  # (stages, ranks)


def ds_config(stages, world):
    """BATCH with 4 micro-batches a step on each data-parallel rank."""
    return dict(BATCH, train_batch_size=BATCH["train_micro_batch_size_per_gpu"] * 4 * world // stages)


def main():
    dscore = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        hf = li.save_llama(os.path.join(folder, "llama"), MODEL)
        shard = li.write_shard(os.path.join(folder, "train.bin"), 40 * T + 1)
        started = time.time()
        results = {}
        for stages, world in RUNS:
            name = f"pp{stages}_w{world}"
            path = os.path.join(folder, name + "_ds.json")
            with open(path, "w") as f:
                json.dump(ds_config(stages, world), f)
            args = [hf, shard, str(T), str(STEPS), str(stages), path]
            start = lambda: cp.start_ranks(folder, name, world, args, "ds_pipe_llama_worker.py")  # noqa: E731
            result = ct.finish_deepspeed(start(), start, started + ct.DEEPSPEED_SECONDS,
                                         f"check_pipeline_llama ({name})")
            with open(result) as f:
                ds = json.load(f)
            config = dict(ds_config(stages, world), train_steps=STEPS, pipeline={"stages": stages},
                          model={"type": "llama", "from_pretrained": hf, "block_size": T},
                          data={"type": "tokens", "path": shard, "shuffle": False})
            results[(stages, world)] = (ds, cp.run_dscore(dscore, folder, name, world, config,
                                                          "check_pipeline_llama"))
        version = next(iter(results.values()))[0]["deepspeed"]
        print(f"check_pipeline_llama: DeepSpeed {version} PipelineModule and dscore, {len(RUNS)} "
              f"pipelines of the Llama in {time.time() - started:.0f} s")
        for (stages, world), (ds, (mine, parts)) in results.items():
            cp.compare("check_pipeline_llama", f"{stages} stages x {world // stages} data-parallel",
                       ds, mine, parts, RTOL, failures)
    for f in failures:
        print(f"check_pipeline_llama: MISMATCH: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
