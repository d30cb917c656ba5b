"""Expert parallelism against DeepSpeed's AutoEP training: transformers builds
a tiny MixtralForCausalLM (2 layers, hidden 64, 4 query heads over 2
key/value heads, 4 experts of width 96, top-2, vocab 300, untied, the
load-balancing loss on at coefficient 0.02) and saves it; DeepSpeed 0.19.8
trains it with "expert_parallel": {"enabled": true, "autoep_size": 2} on 2
ranks (gloo, its CPU accelerator: AutoEP swaps each MoE block for its
AutoEPMoELayer, each rank holding 2 of the experts and the tokens
exchanged with all_to_all_single) at ZeRO 1, 2 and 3 (Adam, lr 1e-3,
clipping 1.0) on an llm.c token shard read as dscore reads it
(ds_llama_worker.py: each rank its own samples, the expert axis being part
of the data axis; T inputs per sample, so the last token is not routed);
`dscore run` trains the same folder (from_pretrained: each rank reads its
own experts) with the same section at -n 2.

Bound: every step's loss within 1e-5 relative of DeepSpeed's (the ZeRO
oracle's bound, tests/external/deepspeed/check_llama_import.py). Measured
over 12 steps: 7.7e-7, 8.2e-7 and 7.7e-7 at stages 1, 2 and 3.

transformers 5.23 and DeepSpeed 0.19.8 disagree on one call (AutoEP asks
transformers' output-capturing registry for a name with a default);
ds_llama_worker.py answers it as DeepSpeed expects (accept_autoep_lookups).

Usage: check_expert_parallel.py <dscore binary>
"""
import os
import sys

import torch
from transformers import MixtralConfig, MixtralForCausalLM

from check_llama_import import MODEL
from check_tensor_parallel import GAS, MICRO, compare_with_deepspeed

EP = 2
STAGES = (1, 2, 3)
MIXTRAL = dict(MODEL, intermediate_size=96, num_local_experts=4, num_experts_per_tok=2,
               output_router_logits=True, router_aux_loss_coef=0.02, router_jitter_noise=0.0)


def save_mixtral(hf):
    """A MixtralForCausalLM of MIXTRAL, seeded, saved to folder `hf`."""
    torch.manual_seed(0)
    config = MixtralConfig(**MIXTRAL, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    MixtralForCausalLM(config).float().save_pretrained(hf)
    return hf


def main():
    section = {"expert_parallel": {"enabled": True, "autoep_size": EP}}
    # Both count every rank as data-parallel: the same train_batch_size.
    compare_with_deepspeed(os.path.abspath(sys.argv[1]), "check_expert_parallel", f"AutoEP {EP}",
                           section, MICRO * GAS * 2, 2, STAGES, save_model=save_mixtral,
                           dscore_batch=MICRO * GAS * 2)


if __name__ == "__main__":
    main()
