// A tiny llama for the model tests (model_test.cc, moe_test.cc): its
// config, batches, scaled-up parameters, and the checks both run (every
// gradient against finite differences; activation checkpointing bit for bit).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "llama_params.h"
#include "runner.h"
#include "tests/plugins/models/transformer_common/fake_layers.h"
#include "tests/plugins/models/transformer_common/model_checks.h"

namespace dscore::llama {

inline LlamaConfig tiny_config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 11;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;  // Q = 16 != C: o_proj is not square
  c.max_position_embeddings = 5;
  c.block_size = 5;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10.0;  // large angles at 5 positions
  c.tie_word_embeddings = tied;
  return c;
}

inline transformer::SplitTokens batch_of(std::vector<int32_t> tokens, int64_t samples,
                                         const LlamaConfig& c) {
  dscore_tensor t{};
  t.struct_size = sizeof t;
  t.data = tokens.data();
  t.dtype = DSCORE_DTYPE_I32;
  t.device_type = DSCORE_DEVICE_CPU;
  t.numel = static_cast<int64_t>(tokens.size());
  const dscore_tensor* tensors[] = {&t};
  dscore_batch batch{sizeof(dscore_batch), samples, 1, tensors};
  return transformer::split_tokens(&batch, c.block_size, c.vocab_size, "llama");
}

// Two samples of block_size + 1 tokens; the second ends in padding.
inline transformer::SplitTokens tiny_batch(const LlamaConfig& c) {
  return batch_of({3, 7, 1, 10, 0, 3, 5, 5, 9, 2, -1, -1}, 2, c);
}

// Parameters from the model's init, scaled up and nudged so the norms'
// weights are not all 1 and the activations are not tiny.
inline void init_layers(const LlamaConfig& c, transformer::testing::FakeLayers* layers) {
  LlamaParams params(c, 7);
  size_t index = 0;
  for (size_t l = 0; l < layers->layer_count(); ++l)
    for (size_t i = 0; i < layers->param_count(l); ++i, ++index) {
      std::vector<float> v(static_cast<size_t>(layers->numel(l, i)));
      params.init(index, 0, layers->numel(l, i), v.data());
      double* p = layers->param<double>(l, i);
      // An MoE router less so: every expert gets tokens of the tiny batch.
      const bool router =
          std::string(params.description().layers[l]->params[i]->name).ends_with(".gate.weight");
      for (size_t k = 0; k < v.size(); ++k)
        p[k] = v[k] * (router ? 2.0 : 15.0) + 0.05 * std::sin(static_cast<double>(k + 3 * index));
    }
}

// Every parameter's gradient on tiny_batch against central finite
// differences of the loss (at least `min_checked` elements compared).
inline void check_every_gradient(const LlamaConfig& c, int min_checked = 150) {
  LlamaParams params(c, 7);
  transformer::testing::FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &layers);
  cpu::CpuBackend<double> backend;
  LlamaRunner<cpu::CpuBackend<double>> runner(c, params, backend);
  const auto batch = tiny_batch(c);
  ASSERT_EQ(batch.counted_targets, 5 + 3);
  const double loss = runner.forward_backward(batch, layers.hooks(), 1.0);
  EXPECT_GT(loss, 0.0);
  auto loss_at = [&] {
    double l = 0;
    runner.forward(batch, layers.hooks(), &l, nullptr);
    return l;
  };
  EXPECT_NEAR(loss_at(), loss, 1e-12);
  transformer::testing::Differences o;
  o.step = 1e-6;  // the scaled-up weights curve the loss: 1e-5 leaves 6e-5 truncation error
  o.per_tensor = 9;
  o.min_largest = 1e-4;
  EXPECT_GT(transformer::testing::expect_finite_differences(
                layers, params.description(), transformer::testing::grads_of(layers), loss_at, o),
            min_checked);
}

// One pass of tiny_batch with bf16 views on the bf16 GEMM (through a
// counting backend) and one with fp32 views on the same values; check(f32,
// b16, loss32, loss16, allocated bf16 bytes) reads the results.
template <class Check>
void bf16_and_fp32_passes(const LlamaConfig& c, Check&& check) {
  using transformer::testing::FakeLayers;
  LlamaParams params(c, 7);
  FakeLayers f32(params.description(), DSCORE_DTYPE_F32),
      b16(params.description(), DSCORE_DTYPE_BF16);
  transformer::testing::fill_same_bf16_values(params, &f32, &b16);
  using Counted = transformer::testing::CountedBackend<cpu::CpuBackend<float>>;
  Counted backend;
  LlamaRunner<Counted> runner(c, params, backend);
  const double loss16 = runner.forward_backward(tiny_batch(c), b16.hooks(), 1.0);
  cpu::CpuBackend<float> plain;
  LlamaRunner<cpu::CpuBackend<float>> reference(c, params, plain);
  const double loss32 = reference.forward_backward(tiny_batch(c), f32.hooks(), 1.0);
  check(f32, b16, loss32, loss16, backend.bytes);
}

// The same gradients, bit for bit, with each number of checkpointed blocks.
inline void expect_checkpointing_bit_for_bit(LlamaConfig c,
                                             const std::vector<int64_t>& checkpoint_blocks) {
  LlamaParams params(c, 7);
  transformer::testing::expect_checkpointing_bit_for_bit(
      params.description(), checkpoint_blocks,
      [&](int64_t blocks, transformer::testing::FakeLayers* layers) {
        c.checkpoint_blocks = blocks;
        init_layers(c, layers);
        cpu::CpuBackend<double> backend;
        LlamaRunner<cpu::CpuBackend<double>> runner(c, params, backend);
        return runner.forward_backward(tiny_batch(c), layers->hooks(), 1.0);
      });
}

}  // namespace dscore::llama
