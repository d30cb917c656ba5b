// The llama's MoE blocks (Mixtral: moe_mlp.h) in double precision on the
// tiny model: every parameter's gradient (the router's, each expert's)
// against central finite differences of the loss, with and without
// output_router_logits (the load-balancing loss over both blocks, with a
// large coefficient so its gradient shows) and at top-1 and top-2; the
// padding token's routes left out of that loss and the loads; activation
// checkpointing recomputing the same routes (bit for bit); Mixtral's and
// Qwen3-MoE's parameter names; Qwen3-MoE's mixed dense and MoE blocks with
// q_norm and k_norm; and the declared activation memory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/plugins/models/llama/tiny_llama.h"
#include "transformer_common/cpu/gemm.h"
#include "transformer_common/cpu/gemm_bf16.h"

DSCORE_PLUGIN_HOST_STORAGE;  // no host attached: the backend allocates with the C allocator

namespace dscore::llama {
namespace {

using transformer::testing::FakeLayers;
using Runner = LlamaRunner<cpu::CpuBackend<double>>;

LlamaConfig moe_config(int64_t k, bool aux) {
  LlamaConfig c = tiny_config(false);
  c.architecture = Architecture::kMixtral;
  c.num_local_experts = 3;
  c.num_experts_per_tok = k;
  c.output_router_logits = aux;
  c.router_aux_loss_coef = 0.3;  // large, so the aux loss's gradient shows
  return c;
}

class LlamaMoe : public ::testing::Test {
 protected:
  void SetUp() override { transformer::cpu::load_gemm_library(); }
};

TEST_F(LlamaMoe, EveryParameterGradientMatchesFiniteDifferencesTop2WithAuxLoss) {
  check_every_gradient(moe_config(2, true), 300);
}

TEST_F(LlamaMoe, EveryParameterGradientMatchesFiniteDifferencesTop2) {
  check_every_gradient(moe_config(2, false), 300);
}

// Top-1's weight is always 1 (renormalised over one route): the router
// learns from the aux loss alone. Two experts, so both get tokens.
TEST_F(LlamaMoe, EveryParameterGradientMatchesFiniteDifferencesTop1WithAuxLoss) {
  LlamaConfig c = moe_config(1, true);
  c.num_local_experts = 2;
  check_every_gradient(c, 200);
}

// Qwen3-MoE: q_norm and k_norm, experts narrower than the dense MLP, the
// first block dense (mlp_only_layers), the k probabilities not renormalised.
LlamaConfig qwen3_moe_config() {
  LlamaConfig c = moe_config(2, true);
  c.architecture = Architecture::kQwen3Moe;
  c.moe_intermediate_size = 6;
  c.norm_topk_prob = false;
  c.mlp_only_layers = {0};
  return c;
}

// Qwen2-MoE: q, k and v biases, a shared expert beside the routed ones
// (scaled by its sigmoid gate), every other block dense (decoder_sparse_step 2).
LlamaConfig qwen2_moe_config() {
  LlamaConfig c = moe_config(2, true);
  c.architecture = Architecture::kQwen2Moe;
  c.moe_intermediate_size = 6;
  c.shared_expert_intermediate_size = 10;
  c.norm_topk_prob = false;
  c.decoder_sparse_step = 2;
  return c;
}

TEST_F(LlamaMoe, EveryParameterGradientMatchesFiniteDifferencesQwen2MoeWithASharedExpert) {
  const LlamaConfig c = qwen2_moe_config();
  EXPECT_FALSE(c.moe_block(0));
  EXPECT_TRUE(c.moe_block(1));
  check_every_gradient(c, 250);
  expect_checkpointing_bit_for_bit(c, {2});
}

TEST_F(LlamaMoe, EveryParameterGradientMatchesFiniteDifferencesQwen3MoeWithADenseBlock) {
  const LlamaConfig c = qwen3_moe_config();
  EXPECT_FALSE(c.moe_block(0));
  EXPECT_TRUE(c.moe_block(1));
  check_every_gradient(c, 250);
}

// The loss is the LM loss plus the coefficient times transformers'
// load_balancing_loss_func: E * sum_e f_e P_e over both blocks' real tokens.
TEST_F(LlamaMoe, AuxLossEntersTheLossWithItsCoefficientAndLeavesPaddingOut) {
  const LlamaConfig with = moe_config(2, true), without = moe_config(2, false);
  LlamaParams params(with, 7);
  FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
  init_layers(with, &layers);
  cpu::CpuBackend<double> backend;
  Runner plain(without, params, backend), aux(with, params, backend);
  const auto batch = tiny_batch(with);
  const double lm = plain.forward_backward(batch, layers.hooks(), 1.0);
  const double total = aux.forward_backward(batch, layers.hooks(), 1.0);
  const transformer::moe::PassStats& s = aux.moe_stats();
  // 9 real input tokens (the second sample's last input is padding), 2
  // blocks, 2 routes each.
  EXPECT_EQ(s.routes, 9 * 2 * 2);
  int64_t load = 0;
  for (int64_t l : s.load) load += l;
  EXPECT_EQ(load, s.routes);
  EXPECT_GT(s.aux_loss, 0.0);
  EXPECT_NEAR(total, lm + 0.3 * s.aux_loss, 1e-12);
  EXPECT_EQ(plain.moe_stats().aux_loss, s.aux_loss);  // reported either way
}

TEST_F(LlamaMoe, ActivationCheckpointingRecomputesTheSameRoutesBitForBit) {
  expect_checkpointing_bit_for_bit(moe_config(2, true), {1, 2});
}

TEST_F(LlamaMoe, ParametersAreMixtralsNamesAndShapes) {
  const LlamaConfig c = moe_config(2, false);
  LlamaParams params(c, 7);
  const dscore_model_layer& block = *params.description().layers[1];
  ASSERT_EQ(block.param_count, 6u + 1u + 3u * 3u);
  auto shape_of = [&](int i) {
    const dscore_model_param* p = block.params[i];
    return std::string(p->name) + " " + std::to_string(p->shape[0]) + "x" +
           std::to_string(p->shape[1]);
  };
  EXPECT_EQ(shape_of(kRouter), "model.layers.0.block_sparse_moe.gate.weight 3x8");
  EXPECT_EQ(shape_of(expert_param(0, kW1)),
            "model.layers.0.block_sparse_moe.experts.0.w1.weight 12x8");
  EXPECT_EQ(shape_of(expert_param(2, kW2)),
            "model.layers.0.block_sparse_moe.experts.2.w2.weight 8x12");
  EXPECT_EQ(shape_of(expert_param(2, kW3)),
            "model.layers.0.block_sparse_moe.experts.2.w3.weight 12x8");
}

TEST_F(LlamaMoe, Qwen3MoeParametersAreTransformersNames) {
  LlamaParams params(qwen3_moe_config(), 7);
  const dscore_model_description& d = params.description();
  const auto name = [&](size_t layer, size_t i) {
    return std::string(d.layers[layer]->params[i]->name);
  };
  EXPECT_EQ(name(1, kGateProj), "model.layers.0.mlp.gate_proj.weight");  // the dense block
  EXPECT_EQ(name(1, 9), "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(name(2, kRouter), "model.layers.1.mlp.gate.weight");
  EXPECT_EQ(name(2, expert_param(1, kW1)), "model.layers.1.mlp.experts.1.gate_proj.weight");
  EXPECT_EQ(name(2, expert_param(1, kW2)), "model.layers.1.mlp.experts.1.down_proj.weight");
  EXPECT_EQ(name(2, expert_param(2, kW3)), "model.layers.1.mlp.experts.2.up_proj.weight");
  EXPECT_EQ(name(2, d.layers[2]->param_count - 1), "model.layers.1.self_attn.k_norm.weight");
  EXPECT_EQ(d.layers[2]->params[expert_param(0, kW1)]->shape[0], 6);  // moe_intermediate_size
  LlamaParams qwen2(qwen2_moe_config(), 7);
  const dscore_model_layer& moe = *qwen2.description().layers[2];
  EXPECT_STREQ(moe.params[shared_expert_param(3, kW1)]->name,
               "model.layers.1.mlp.shared_expert.gate_proj.weight");
  EXPECT_STREQ(moe.params[shared_expert_param(3, kSharedGate)]->name,
               "model.layers.1.mlp.shared_expert_gate.weight");
  EXPECT_STREQ(moe.params[moe.param_count - 3]->name, "model.layers.1.self_attn.q_proj.bias");
  EXPECT_STREQ(moe.params[moe.param_count - 1]->name, "model.layers.1.self_attn.v_proj.bias");
}

// bf16 views on the bf16 GEMM: the attention's (and a dense block's MLP's)
// linears read bf16 operands, the experts fp32 copies. The pass allocates
// what it declares for that form (the buffers are sized per form: a block
// of the wrong form would overrun them, which ASan sees) and its loss is
// fp32 views' within 1%. Gradients are not compared: bf16 rounding of the
// router's input may flip a near-tie route of the tiny model, which moves
// whole experts' gradients (the dense model's test bounds them).
TEST_F(LlamaMoe, Bf16ViewsAllocateWhatTheyDeclareAndComputeLikeFp32) {
  if (!transformer::cpu::bf16_gemm_available())
    GTEST_SKIP() << "no bf16 GEMM here: " << transformer::cpu::bf16_gemm_unavailable_reason();
  for (const LlamaConfig& c : {moe_config(2, true), qwen2_moe_config()}) {
    LlamaParams params(c, 7);
    bf16_and_fp32_passes(
        c, [&](FakeLayers&, FakeLayers&, double loss32, double loss16, uint64_t bytes) {
          EXPECT_EQ(bytes, (runner_activation_bytes<float, float>(c, params, 2, true)));
          EXPECT_NEAR(loss16, loss32, 1e-2 * loss32);
        });
  }
}

using CountedCpuBackend = transformer::testing::CountedBackend<cpu::CpuBackend<double>>;

TEST_F(LlamaMoe, DeclaredActivationBytesAreWhatAPassAllocates) {
  for (LlamaConfig c : {moe_config(2, true), qwen3_moe_config(), qwen2_moe_config()}) {
    LlamaParams params(c, 7);
    for (int64_t checkpoint_blocks : {0, 2}) {
      c.checkpoint_blocks = checkpoint_blocks;
      FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
      init_layers(c, &layers);
      CountedCpuBackend backend;
      LlamaRunner<CountedCpuBackend> runner(c, params, backend);
      runner.forward_backward(tiny_batch(c), layers.hooks(), 1.0);
      const uint64_t declared = runner_activation_bytes<double, double>(c, params, 2, false);
      EXPECT_EQ(backend.bytes, declared) << "checkpoint_blocks " << checkpoint_blocks;
    }
  }
}

}  // namespace
}  // namespace dscore::llama
