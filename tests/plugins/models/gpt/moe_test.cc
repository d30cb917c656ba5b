// The gpt's MoE blocks (moe_mlp.h) in double precision on the tiny model:
// every parameter's gradient (the experts', the gate's, PR-MoE's) against
// central finite differences of the training loss (the LM loss plus
// moe_loss_coeff * l_aux), under top-1 with RTS and RSample, Jitter, top-2
// with its second-expert sampling and dropped routes, dropless top-2 and
// PR-MoE; activation checkpointing recomputing the same routes (bit for
// bit); the loss's aux term; and the declared activation memory.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "gpt_params.h"
#include "runner.h"
#include "tests/plugins/models/gpt/tiny_gpt.h"
#include "tests/plugins/models/transformer_common/fake_layers.h"
#include "tests/plugins/models/transformer_common/model_checks.h"
#include "transformer_common/cpu/gemm.h"

DSCORE_PLUGIN_HOST_STORAGE;  // no host attached: the backend allocates with the C allocator

namespace dscore::gpt {
namespace {

namespace moe = transformer::moe;
using transformer::testing::expect_same_grads;
using transformer::testing::FakeLayers;
using Runner = GptRunner<cpu::CpuBackend<double>>;

struct Variant {
  std::string name;
  GptConfig config;
  bool drops = false;  // the tiny batch overflows an expert
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

GptConfig moe_config(int64_t k, int64_t every) {
  GptConfig c = tiny_config();
  c.moe.num_experts = 4;
  c.moe.k = k;
  c.moe.min_capacity = 0;
  c.moe_every = every;
  c.moe_loss_coeff = 0.3;  // large, so the aux loss's gradient shows
  return c;
}

std::vector<Variant> variants() {
  std::vector<Variant> v;
  {
    GptConfig c = moe_config(2, 1);
    c.moe.capacity_factor = 0.5;  // ceil(10 / 4 * 1.0) = 3 slots: routes drop
    v.push_back({"top2_sampling_drops", c, true});
  }
  {
    GptConfig c = moe_config(1, 1);
    c.moe.capacity_factor = 0.5;
    c.moe.noisy_gate_policy = moe::NoisyGate::kRSample;
    v.push_back({"top1_rts_rsample_drops", c, true});
  }
  {
    GptConfig c = moe_config(1, 2);
    c.moe.use_rts = false;
    c.moe.noisy_gate_policy = moe::NoisyGate::kJitter;
    v.push_back({"top1_jitter", c, false});
  }
  {
    GptConfig c = moe_config(3, 1);
    c.moe.capacity_factor = 0.4;
    v.push_back({"top3_probs_drops", c, true});
  }
  {
    GptConfig c = moe_config(2, 1);
    c.moe.router = moe::Router::kDroplessTopK;
    v.push_back({"dropless_top2", c, false});
  }
  {
    GptConfig c = moe_config(1, 1);
    c.moe.capacity_factor = 4.0;  // room for every token
    c.moe_residual = true;
    v.push_back({"pr_moe_residual", c, false});
  }
  return v;
}

class GptMoe : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override { transformer::cpu::load_gemm_library(); }
};

TEST_P(GptMoe, EveryParameterGradientMatchesFiniteDifferences) {
  const GptConfig c = GetParam().config;
  GptParams params(c, 7);
  FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &layers);
  cpu::CpuBackend<double> backend;
  Runner runner(c, params, backend);
  const SplitTokens batch = tiny_batch(c);
  const double loss = runner.forward_backward(batch, layers.hooks(), 1.0);
  const MoeStats stats = runner.moe_stats();
  EXPECT_GT(stats.aux_loss, 0.0);
  EXPECT_EQ(stats.dropped_routes > 0, GetParam().drops) << stats.dropped_routes;
  // The analytic gradients, before the differences add more into the views.
  const auto analytic = transformer::testing::grads_of(layers);
  auto loss_at = [&] { return runner.forward_backward(batch, layers.hooks(), 1.0); };
  EXPECT_EQ(loss_at(), loss);  // the same routes and noise again
  transformer::testing::Differences o;
  o.per_tensor = 9;
  EXPECT_GT(transformer::testing::expect_finite_differences(layers, params.description(), analytic,
                                                            loss_at, o),
            150);
  o.counted = ".mlp.";
  o.per_tensor = 1;  // the MoE tensors alone, once more at their first elements
  EXPECT_GT(transformer::testing::expect_finite_differences(layers, params.description(), analytic,
                                                            loss_at, o),
            8);
}

TEST_P(GptMoe, CheckpointedBlocksRecomputeTheSameRoutesBitForBit) {
  expect_checkpointing_bit_for_bit(GetParam().config, {1, 2});
}

INSTANTIATE_TEST_SUITE_P(Gating, GptMoe, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return info.param.name; });

class GptMoeModel : public ::testing::Test {
 protected:
  void SetUp() override { transformer::cpu::load_gemm_library(); }
};

TEST_F(GptMoeModel, TheLossAddsTheCoefficientTimesEachBlocksAuxLoss) {
  GptConfig c = moe_config(2, 1);
  GptParams params(c, 7);
  auto loss_with = [&](double coeff, double* aux) {
    c.moe_loss_coeff = coeff;
    FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
    init_layers(c, &layers);
    cpu::CpuBackend<double> backend;
    Runner runner(c, params, backend);
    const double loss = runner.forward_backward(tiny_batch(c), layers.hooks(), 1.0);
    *aux = runner.moe_stats().aux_loss;
    return loss;
  };
  double aux0 = 0, aux1 = 0;
  const double lm = loss_with(0.0, &aux0), total = loss_with(0.25, &aux1);
  EXPECT_EQ(aux0, aux1);
  // Two MoE blocks, each's l_aux about 1 (E * sum_e me_e * ce_e at balance).
  EXPECT_GT(aux0, 1.0);
  EXPECT_NEAR(total - lm, 0.25 * aux0, 1e-12);
}

TEST_F(GptMoeModel, TheExpertsAreDistinctAndTheirBiasesSkipWeightDecay) {
  const GptConfig c = moe_config(1, 2);
  GptParams params(c, 7);
  const dscore_model_layer& block = *params.description().layers[2];  // block 1: the MoE block
  ASSERT_EQ(block.param_count, static_cast<size_t>(kExpertProjBias + 1));
  EXPECT_STREQ(block.params[kGateWeight]->name, "transformer.h.1.mlp.gate.wg.weight");
  EXPECT_EQ(block.params[kExpertFcWeight]->shape[0], 4);
  EXPECT_TRUE(block.params[kExpertFcBias]->flags & DSCORE_PARAM_NO_WEIGHT_DECAY);
  EXPECT_FALSE(block.params[kExpertFcWeight]->flags & DSCORE_PARAM_NO_WEIGHT_DECAY);
  // Block 0 stays dense.
  EXPECT_EQ(params.description().layers[1]->param_count, static_cast<size_t>(kFcProjBias + 1));
  // Expert 0's and expert 1's first weights differ (each element its own draw).
  size_t index = 0;
  for (size_t l = 0; l < 2; ++l) index += params.description().layers[l]->param_count;
  index += kExpertFcWeight;
  const int64_t per_expert = 4 * c.n_embd * c.n_embd;
  std::vector<float> w(static_cast<size_t>(2 * per_expert));
  params.init(index, 0, 2 * per_expert, w.data());
  EXPECT_NE(w[0], w[static_cast<size_t>(per_expert)]);
}

using CountedCpuBackend = transformer::testing::CountedBackend<cpu::CpuBackend<double>>;

TEST_F(GptMoeModel, DeclaredActivationBytesCountTheMoeBuffers) {
  GptConfig c = moe_config(2, 1);
  c.moe_residual = true;
  GptParams params(c, 7);
  FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &layers);
  CountedCpuBackend backend;
  GptRunner<CountedCpuBackend> runner(c, params, backend);
  runner.forward_backward(tiny_batch(c), layers.hooks(), 1.0);
  runner.forward_backward(tiny_batch(c), layers.hooks(), 1.0);
  const uint64_t declared = runner_activation_bytes<double, double>(c, params, 2, false);
  EXPECT_EQ(backend.bytes, declared);
  const GptConfig dense = tiny_config();
  GptParams dense_params(dense, 7);
  const uint64_t dense_bytes =
      runner_activation_bytes<double, double>(dense, dense_params, 2, false);
  EXPECT_GT(declared, dense_bytes);
}

}  // namespace
}  // namespace dscore::gpt
