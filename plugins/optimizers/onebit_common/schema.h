// Shared by the 1-bit optimizers' params schemas (onebitadam, zerooneadam,
// onebitlamb): the keys each accepts only for DeepSpeed compatibility, with
// the same meaning in all three, closing the schema's JSON object.
#pragma once

#include <string>

namespace dscore::onebit {

// `head`: the schema's opening members, up to and including the comma
// after the last; `name`: the optimizer as DeepSpeed's docs name it
// ("1-bit Adam"). The whole schema (bias_correction, eps_inside_sqrt,
// amsgrad, cuda_aware, comm_backend_name and max_grad_norm appended).
inline std::string params_schema(const std::string& head, const std::string& name) {
  return head + R"json(
  "bias_correction": {"type": "bool", "default": true,
                      "doc": "accepted for DeepSpeed compatibility; )json" +
         name + R"json( never bias-corrects"},
  "eps_inside_sqrt": {"type": "bool", "default": false,
                      "doc": "accepted for DeepSpeed compatibility; no effect (as in DeepSpeed's )json" +
         name + R"json()"},
  "amsgrad": {"type": "bool", "default": false,
              "doc": "must be false: )json" +
         name + R"json( does not support AMSGrad"},
  "cuda_aware": {"type": "bool", "default": false,
                 "doc": "accepted for DeepSpeed compatibility; dscore uses the job's communicator"},
  "comm_backend_name": {"type": "string", "default": "nccl", "enum": ["nccl", "mpi", "hccl", "compressed"],
                        "doc": "accepted for DeepSpeed compatibility; dscore uses the job's communicator"},
  "max_grad_norm": {"type": "number", "doc": "rejected as in DeepSpeed: use gradient_clipping",
                    "error": "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the deepspeed parameter 'gradient_clipping' see: https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details"}
})json";
}

}  // namespace dscore::onebit
