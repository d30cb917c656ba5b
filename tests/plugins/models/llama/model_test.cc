// The whole llama model (the runner over the CPU backend) in double
// precision on tiny configs (grouped-query attention, tied and untied
// heads, Llama 3 rope scaling): every parameter's gradient against central
// finite differences of the loss (tolerance 1e-7 + 1e-5 relative, as the
// gpt model's), the hook protocol, activation checkpointing (the same
// gradients, bit for bit), declared activation bytes against what a pass
// allocates, padding, and loss scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "llama_params.h"
#include "runner.h"
#include "tests/plugins/models/llama/tiny_llama.h"
#include "tests/plugins/models/transformer_common/fake_layers.h"
#include "tests/plugins/models/transformer_common/model_checks.h"
#include "transformer_common/cpu/gemm.h"
#include "transformer_common/cpu/gemm_bf16.h"

DSCORE_PLUGIN_HOST_STORAGE;  // no host attached: the backend allocates with the C allocator

namespace dscore::llama {
namespace {

using transformer::testing::expect_same_grads;
using transformer::testing::expect_scaled_grads;
using transformer::testing::FakeLayers;
using Runner = LlamaRunner<cpu::CpuBackend<double>>;

class LlamaModel : public ::testing::Test {
 protected:
  void SetUp() override { transformer::cpu::load_gemm_library(); }
};

TEST_F(LlamaModel, EveryParameterGradientMatchesFiniteDifferencesUntied) {
  check_every_gradient(tiny_config(false));
}

TEST_F(LlamaModel, EveryParameterGradientMatchesFiniteDifferencesTied) {
  check_every_gradient(tiny_config(true));
}

TEST_F(LlamaModel, EveryParameterGradientMatchesFiniteDifferencesWithLlama3Rope) {
  LlamaConfig c = tiny_config(false);
  c.rope_scaling.llama3 = true;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 16;  // wavelengths 6 .. 60 straddle 4 and 16
  check_every_gradient(c);
}

// Qwen3's per-head RMSNorm of q and k (q_norm, k_norm) before RoPE.
TEST_F(LlamaModel, EveryParameterGradientMatchesFiniteDifferencesWithQwen3QkNorm) {
  LlamaConfig c = tiny_config(false);
  c.architecture = Architecture::kQwen3;
  check_every_gradient(c);
  expect_checkpointing_bit_for_bit(c, {1, 2});
}

TEST_F(LlamaModel, ParameterNamesAndShapesAreLlamaForCausalLMs) {
  const LlamaConfig c = tiny_config(false);
  LlamaParams params(c, 7);
  const dscore_model_description& d = params.description();
  ASSERT_EQ(d.layer_count, 4u);
  auto shape_of = [&](size_t l, size_t i) {
    const dscore_model_param* p = d.layers[l]->params[i];
    return std::string(p->name) + " " + std::to_string(p->shape[0]) +
           (p->ndim == 2 ? "x" + std::to_string(p->shape[1]) : "");
  };
  EXPECT_EQ(shape_of(0, 0), "model.embed_tokens.weight 11x8");
  const std::vector<std::string> block = {"model.layers.1.input_layernorm.weight 8",
                                          "model.layers.1.self_attn.q_proj.weight 16x8",
                                          "model.layers.1.self_attn.k_proj.weight 8x8",
                                          "model.layers.1.self_attn.v_proj.weight 8x8",
                                          "model.layers.1.self_attn.o_proj.weight 8x16",
                                          "model.layers.1.post_attention_layernorm.weight 8",
                                          "model.layers.1.mlp.gate_proj.weight 12x8",
                                          "model.layers.1.mlp.up_proj.weight 12x8",
                                          "model.layers.1.mlp.down_proj.weight 8x12"};
  ASSERT_EQ(d.layers[2]->param_count, block.size());
  for (size_t i = 0; i < block.size(); ++i) EXPECT_EQ(shape_of(2, i), block[i]);
  EXPECT_EQ(shape_of(3, 0), "model.norm.weight 8");
  EXPECT_EQ(shape_of(3, 1), "lm_head.weight 11x8");
  LlamaParams tied(tiny_config(true), 7);
  EXPECT_EQ(tied.description().layers[3]->param_count, 1u);  // no lm_head.weight
}

TEST_F(LlamaModel, HooksAreCalledInOrderAndEveryAcquireIsReleased) {
  for (bool tied : {true, false}) {
    const LlamaConfig c = tiny_config(tied);
    LlamaParams params(c, 7);
    FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
    init_layers(c, &layers);
    cpu::CpuBackend<double> backend;
    Runner runner(c, params, backend);
    runner.forward_backward(tiny_batch(c), layers.hooks(), 1.0);
    std::vector<std::string> expected = {"F0", "R0", "F1", "R1", "F2", "R2", "F3", "R3"};
    if (tied)
      expected.insert(expected.end(), {"B0", "R0"});  // the head: embedding gradient, part 1
    expected.insert(expected.end(),
                    {"B3", "G3", "R3", "B2", "G2", "R2", "B1", "G1", "R1", "B0", "G0", "R0"});
    EXPECT_EQ(layers.events, expected) << (tied ? "tied" : "untied");
    EXPECT_EQ(layers.outstanding(), 0);
    for (size_t l = 0; l < layers.layer_count(); ++l) EXPECT_EQ(layers.grads_ready_calls(l), 1);
  }
}

TEST_F(LlamaModel, ActivationCheckpointingGivesTheSameGradientsBitForBit) {
  expect_checkpointing_bit_for_bit(tiny_config(false), {1, 2});
}

TEST_F(LlamaModel, LossScaleScalesTheGradientsOnly) {
  const LlamaConfig c = tiny_config(true);
  LlamaParams params(c, 7);
  FakeLayers one(params.description(), DSCORE_DTYPE_F64),
      scaled(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &one);
  init_layers(c, &scaled);
  cpu::CpuBackend<double> backend;
  Runner runner(c, params, backend);
  const double l1 = runner.forward_backward(tiny_batch(c), one.hooks(), 1.0);
  const double l2 = runner.forward_backward(tiny_batch(c), scaled.hooks(), 1024.0);
  EXPECT_EQ(l1, l2);
  expect_scaled_grads(scaled, one, 1024.0);
}

TEST_F(LlamaModel, PaddingAfterAPromptDoesNotChangeItsLogits) {
  for (bool tied : {true, false}) {
    const LlamaConfig c = tiny_config(tied);
    LlamaParams params(c, 7);
    FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
    init_layers(c, &layers);
    cpu::CpuBackend<double> backend;
    Runner runner(c, params, backend);
    auto logits_of = [&](std::vector<int32_t> tokens) {
      std::vector<float> logits(static_cast<size_t>(c.vocab_size));
      runner.forward(batch_of(std::move(tokens), 1, c), layers.hooks(), nullptr, logits.data());
      return logits;
    };
    EXPECT_EQ(logits_of({4, 2, -1, -1, -1, -1}), logits_of({4, 2, -1, -1, -1, 9}));
    EXPECT_NE(logits_of({4, 2, -1, -1, -1, -1}), logits_of({4, 3, -1, -1, -1, -1}));
  }
}

using CountedCpuBackend = transformer::testing::CountedBackend<cpu::CpuBackend<double>>;

TEST_F(LlamaModel, DeclaredActivationBytesAreWhatAPassAllocates) {
  LlamaConfig c = tiny_config(false);
  LlamaParams params(c, 7);
  uint64_t previous = 0;
  for (int64_t checkpoint_blocks : {0, 1, 2}) {
    c.checkpoint_blocks = checkpoint_blocks;
    FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
    init_layers(c, &layers);
    CountedCpuBackend backend;
    LlamaRunner<CountedCpuBackend> runner(c, params, backend);
    runner.forward_backward(tiny_batch(c), layers.hooks(), 1.0);
    runner.forward_backward(tiny_batch(c), layers.hooks(), 1.0);
    const uint64_t declared = runner_activation_bytes<double, double>(c, params, 2, false);
    EXPECT_EQ(backend.bytes, declared) << "checkpoint_blocks " << checkpoint_blocks;
    if (checkpoint_blocks == 1) {
      EXPECT_EQ(declared, previous);  // one checkpointed block shares the one set it frees
    } else if (checkpoint_blocks == 2) {
      EXPECT_LT(declared, previous);
    }
    previous = declared;
  }
}

// bf16 views on the bf16 GEMM: the RMSNorm and SwiGLU outputs, and the
// gate_proj and up_proj output gradients, are made as bf16 operands in
// buffers of half the size (what runner_activation_bytes
// declares for that form), and the step computes like fp32 views on the
// same values within bf16 rounding (the loss within 1%, every gradient
// within 1/8 of its L2 norm; the same bound as gpt's test).
TEST_F(LlamaModel, Bf16ViewsUseHalfSizeOperandBuffersAndComputeLikeFp32) {
  if (!transformer::cpu::bf16_gemm_available())
    GTEST_SKIP() << "no bf16 GEMM here: " << transformer::cpu::bf16_gemm_unavailable_reason();
  const LlamaConfig c = tiny_config(/*tied=*/false);
  LlamaParams params(c, 7);
  bf16_and_fp32_passes(
      c, [&](FakeLayers& f32, FakeLayers& b16, double loss32, double loss16, uint64_t bytes) {
        const uint64_t bf16_form = runner_activation_bytes<float, float>(c, params, 2, true);
        EXPECT_EQ(bytes, bf16_form);
        const int64_t N = 2 * c.block_size;
        // Half of ln1, ln2 and swiglu in each of the 2 blocks, and of dgate and dup.
        const uint64_t halved =
            (2 * (N * c.hidden_size * 2 + N * c.intermediate_size) + 2 * N * c.intermediate_size) /
            2 * 4;
        const uint64_t fp32_form = runner_activation_bytes<float, float>(c, params, 2, false);
        EXPECT_EQ(fp32_form - bf16_form, halved);
        EXPECT_NE(loss16, loss32);
        EXPECT_NEAR(loss16, loss32, 1e-2 * loss32);
        for (size_t l = 0; l < f32.layer_count(); ++l)
          for (size_t i = 0; i < f32.param_count(l); ++i) {
            double norm = 0, error = 0;
            for (int64_t e = 0; e < f32.numel(l, i); ++e) {
              const double want = f32.grad<float>(l, i)[e];
              const double got = sdk::bf16_to_float(b16.grad<uint16_t>(l, i)[e]);
              norm += want * want;
              error += (got - want) * (got - want);
            }
            EXPECT_LE(std::sqrt(error), std::sqrt(norm) / 8 + 1e-12) << l << "." << i;
          }
      });
}

}  // namespace
}  // namespace dscore::llama
