// The llama's MoE blocks (Mixtral: moe_mlp.h) in double precision on the
// tiny model: every parameter's gradient (the router's, each expert's)
// against central finite differences of the loss, with and without
// output_router_logits (the load-balancing loss over both blocks, with a
// large coefficient so its gradient shows) and at top-1 and top-2; the
// padding token's routes left out of that loss and the loads; activation
// checkpointing recomputing the same routes (bit for bit); Mixtral's
// parameter names; and the declared activation memory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/plugins/models/llama/tiny_llama.h"
#include "transformer_common/cpu/gemm.h"

DSCORE_PLUGIN_HOST_STORAGE;  // no host attached: the backend allocates with the C allocator

namespace dscore::llama {
namespace {

using transformer::testing::FakeLayers;
using Runner = LlamaRunner<cpu::CpuBackend<double>>;

LlamaConfig moe_config(int64_t k, bool aux) {
  LlamaConfig c = tiny_config(false);
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

using CountedCpuBackend = transformer::testing::CountedBackend<cpu::CpuBackend<double>>;

TEST_F(LlamaMoe, DeclaredActivationBytesAreWhatAPassAllocates) {
  LlamaConfig c = moe_config(2, true);
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

}  // namespace
}  // namespace dscore::llama
