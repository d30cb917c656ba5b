"""Ulysses sequence parallelism against DeepSpeed's: transformers builds a
tiny LlamaForCausalLM (2 layers, hidden 64, 4 query heads over 2 key/value
heads, vocab 300, untied) and saves it; DeepSpeed 0.19.8 trains it with
"sequence_parallel_size": 2 on 2 ranks (gloo, its CPU accelerator) at ZeRO
1, 2 and 3 (Adam, lr 1e-3, clipping 1.0) through its ALST attention for
Hugging Face models (UlyssesSPAttentionHF over sdpa: the all-to-alls around
attention) and its sequence-data-parallel gradient reduction, each rank
feeding its slice of every sample's positions (ds_llama_worker.py); `dscore
run` trains the same folder with the same key at -n 2.

Bound: every step's loss within 1e-5 relative of DeepSpeed's (the ZeRO
oracle's bound, tests/external/deepspeed/check_llama_import.py). Measured:
1.2e-6 at each stage (12 steps).

DeepSpeed leaves the loss to the user under Ulysses (its tutorial gathers
the slices' mean losses and weights them by their tokens); the worker
computes each slice's share of the samples' mean directly, which is what
dscore's model plugins compute and what DeepSpeed's gradient reduction
(a sum over the sequence group, divided by world / sp) expects.

Usage: check_sequence_parallel.py <dscore binary>
"""
import os
import sys

from check_tensor_parallel import compare_with_deepspeed, GAS, MICRO

SP = 2
STAGES = (1, 2, 3)


def main():
    # DeepSpeed's batch triad counts world / sequence_parallel_size ranks.
    compare_with_deepspeed(os.path.abspath(sys.argv[1]), "check_sequence_parallel", f"Ulysses {SP}",
                           {"sequence_parallel_size": SP}, MICRO * GAS, SP, STAGES)


if __name__ == "__main__":
    main()
