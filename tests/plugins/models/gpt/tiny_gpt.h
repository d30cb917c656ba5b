// A tiny GPT for the model tests (model_test.cc, moe_test.cc): its config,
// a two-sample batch (the second ends in padding), parameters from GPT-2's
// init nudged off their special values, and the activation-checkpointing
// check both make.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "gpt_params.h"
#include "runner.h"
#include "tests/plugins/models/transformer_common/fake_layers.h"
#include "tests/plugins/models/transformer_common/model_checks.h"
#include "tokens.h"

namespace dscore::gpt {

inline GptConfig tiny_config() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 5;
  c.vocab_size = 11;
  return c;
}

// Two samples of block_size + 1 tokens; the second ends in padding.
inline SplitTokens tiny_batch(const GptConfig& c) {
  std::vector<int32_t> tokens = {3, 7, 1, 10, 0, 3, 5, 5, 9, 2, -1, -1};
  dscore_tensor t{};
  t.struct_size = sizeof t;
  t.data = tokens.data();
  t.dtype = DSCORE_DTYPE_I32;
  t.device_type = DSCORE_DEVICE_CPU;
  t.numel = static_cast<int64_t>(tokens.size());
  const dscore_tensor* tensors[] = {&t};
  dscore_batch batch{sizeof(dscore_batch), 2, 1, tensors};
  return split_tokens(&batch, c);
}

// Parameters from GPT-2's init, then nudged so LayerNorm weights and biases
// are not 1 and 0 (their gradients would be checked at a special point).
inline void init_layers(const GptConfig& c, transformer::testing::FakeLayers* layers) {
  GptParams params(c, 7);
  size_t index = 0;
  for (size_t l = 0; l < layers->layer_count(); ++l)
    for (size_t i = 0; i < layers->param_count(l); ++i, ++index) {
      std::vector<float> v(static_cast<size_t>(layers->numel(l, i)));
      params.init(index, 0, layers->numel(l, i), v.data());
      double* p = layers->param<double>(l, i);
      for (size_t k = 0; k < v.size(); ++k)
        p[k] = v[k] * 5.0 + 0.01 * std::sin(static_cast<double>(k + index));
    }
}

// The tiny batch's pass with each of `checkpoint_blocks` recomputed gives
// the loss and gradients of none, bit for bit (double precision).
inline void expect_checkpointing_bit_for_bit(GptConfig c,
                                             const std::vector<int64_t>& checkpoint_blocks) {
  GptParams params(c, 7);
  transformer::testing::expect_checkpointing_bit_for_bit(
      params.description(), checkpoint_blocks,
      [&](int64_t blocks, transformer::testing::FakeLayers* layers) {
        c.checkpoint_blocks = blocks;
        init_layers(c, layers);
        cpu::CpuBackend<double> backend;
        GptRunner<cpu::CpuBackend<double>> runner(c, params, backend);
        return runner.forward_backward(tiny_batch(c), layers->hooks(), 1.0);
      });
}

}  // namespace dscore::gpt
