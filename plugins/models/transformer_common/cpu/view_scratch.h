// What a CPU pass holds beyond its activations (the runners' allocate(),
// counted by counting_backend.h) because of the dtypes of the views the
// host lends (host_backend.h), for a model's activation_bytes_for
// (model.h): 16-bit parameters are used through fp32 copies of the
// acquired layer, 16-bit gradients through fp32 accumulators; in bf16 runs
// on the bf16 GEMM, the linears, attention and the LM head also keep their
// rounded operands (linear_bf16.h, attention_bf16.h, linear.h). Each count
// sits beside the code that allocates it.
#pragma once

#include <dscore/plugin.h>
#include <tbb/task_arena.h>

#include <cstdint>

#include "attention_bf16.h"
#include "gemm_bf16.h"
#include "linear.h"
#include "linear_bf16.h"

namespace dscore::transformer::cpu {

struct PassShape {
  int64_t tokens = 0;           // N: micro batch x block size
  int64_t largest_layer = 0;    // the most parameter elements one layer has
  int64_t linear_in = 0;        // the widest linear input (features)
  int64_t linear_out = 0;       // the widest linear output
  int64_t embd = 0, vocab = 0;  // the LM head
  AttentionShape attention;
  bool attention_heads_kept = false;  // the runner keeps attention's rounded heads itself
  // The widest product the runner hands over in chunks (gemm_bf16_consumed):
  // its columns and inner dimension (0: none).
  int64_t consumed_n = 0, consumed_k = 0;
};

// The most parameter elements one of `layers` layers has (params'
// layer_numels(l): one count per parameter of layer l).
template <class Params>
int64_t largest_layer_numel(const Params& params, int64_t layers) {
  int64_t largest = 0;
  for (int64_t l = 0; l < layers; ++l) {
    int64_t sum = 0;
    for (int64_t n : params.layer_numels(static_cast<size_t>(l))) sum += n;
    largest = sum > largest ? sum : largest;
  }
  return largest;
}

// With `threads` compute threads (this arena's, by default).
inline uint64_t view_scratch_bytes(const PassShape& s, dscore_dtype param_dtype,
                                   dscore_dtype grad_dtype,
                                   int64_t threads = tbb::this_task_arena::max_concurrency()) {
  const uint64_t layer = static_cast<uint64_t>(s.largest_layer) * sizeof(float);
  uint64_t bytes = 0;
  if (param_dtype != DSCORE_DTYPE_F32) bytes += layer;  // HostBackend::Params' copies
  if (grad_dtype != DSCORE_DTYPE_F32) bytes += layer;   // HostBackend::Grads' accumulators
  if (bf16_operands_for(param_dtype))
    bytes += linear_bf16_working_bytes(s.tokens, s.linear_in, s.linear_out) +
             attention_bf16_working_bytes(s.attention, threads, s.attention_heads_kept) +
             lm_head_bf16_working_bytes(s.tokens, s.embd, s.vocab) +
             gemm_bf16_consumed_working_bytes(s.consumed_n, s.consumed_k, threads);
  return bytes;
}

}  // namespace dscore::transformer::cpu
