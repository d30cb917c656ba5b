// MoE routing (plugins/models/transformer_common/moe/gating.h) on cases
// worked by hand, and its backward against central differences of
// sum(weight * R) + a * aux_loss (the choices held: no perturbation moves a
// token to another expert). DeepSpeed's own gating is the oracle in
// tests/external/deepspeed/check_moe_gating.py.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "transformer_common/moe/gating.h"

namespace dscore::transformer::moe {
namespace {

// Logits that send token s to expert prefer[s] first and second[s] next.
std::vector<float> logits_for(const std::vector<int>& prefer, const std::vector<int>& second,
                              int64_t E) {
  std::vector<float> logits(prefer.size() * E, 0.0f);
  for (size_t s = 0; s < prefer.size(); ++s) {
    for (int64_t e = 0; e < E; ++e) logits[s * E + e] = -0.1f * static_cast<float>(e + s % 3);
    logits[s * E + prefer[s]] = 2.0f + 0.01f * static_cast<float>(s);
    if (!second.empty()) logits[s * E + second[s]] = 1.0f;
  }
  return logits;
}

TEST(MoeGating, TopOneWithoutRtsDropsTheTokensTorchTopkLeaves) {
  GatingConfig c;
  c.num_experts = 2;
  c.k = 1;
  c.min_capacity = 0;
  c.use_rts = false;
  // 8 tokens, 6 prefer expert 0: capacity ceil(8 / 2 * 1.0) = 4. Which 4
  // of the equal mask entries stay is torch.topk's choice on the CPU
  // (nth_element over (value, index)): tokens 0, 4, 5, 7, as DeepSpeed keeps.
  const std::vector<int> prefer = {0, 0, 1, 0, 0, 0, 1, 0};
  const auto logits = logits_for(prefer, {}, 2);
  const Routing r = route(c, logits.data(), 8, /*training=*/true, {});
  EXPECT_EQ(r.capacity, 4);
  EXPECT_EQ(r.expert_counts, (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, -1, 1, -1, 0, 0, 1, 0}));
  EXPECT_EQ(r.slot, (std::vector<int32_t>{0, 0, 0, 0, 1, 2, 1, 3}));
  EXPECT_EQ(r.dropped, 2);
  for (int s = 0; s < 8; ++s) {
    const float max = std::max(logits[s * 2], logits[s * 2 + 1]);
    const float g = std::exp(logits[s * 2 + prefer[s]] - max) /
                    (std::exp(logits[s * 2] - max) + std::exp(logits[s * 2 + 1] - max));
    EXPECT_NEAR(r.weight[s], r.expert[s] < 0 ? 0.0f : g, 1e-6f) << s;
  }
  // l_aux = E * sum_e mean_gate_e * (count_e / S).
  double me0 = 0;
  for (int s = 0; s < 8; ++s) me0 += r.gates[s * 2];
  me0 /= 8;
  EXPECT_NEAR(r.aux_loss, 2 * (me0 * 6 / 8 + (1 - me0) * 2 / 8), 1e-6);
}

TEST(MoeGating, RandomTokenSelectionKeepsTheHighestPriorities) {
  GatingConfig c;
  c.num_experts = 2;
  c.k = 1;
  c.min_capacity = 0;
  const std::vector<int> prefer = {0, 0, 1, 0, 0, 0, 1, 0};
  const auto logits = logits_for(prefer, {}, 2);
  std::vector<float> uniform(16, 0.5f);
  // Expert 0's tokens 0, 1, 3, 4, 5, 7: the four highest priorities are 7, 5, 1, 3.
  const float priority[8] = {0.1f, 0.6f, 0.9f, 0.5f, 0.2f, 0.8f, 0.3f, 0.95f};
  for (int s = 0; s < 8; ++s) uniform[s * 2 + prefer[s]] = priority[s];
  GatingNoise noise;
  noise.uniform = uniform.data();
  ASSERT_TRUE(needs_uniform(c, true));
  EXPECT_TRUE(needs_uniform(c, false));  // DeepSpeed draws them in evaluation too
  const Routing r = route(c, logits.data(), 8, true, noise);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{-1, 0, 1, 0, -1, 0, 1, 0}));
  // Kept tokens are numbered in token order (cumsum), not by priority.
  EXPECT_EQ(r.slot, (std::vector<int32_t>{0, 0, 0, 1, 0, 2, 1, 3}));
}

TEST(MoeGating, TopTwoPlacesSecondChoicesAfterAllFirstChoices) {
  GatingConfig c;
  c.num_experts = 3;
  c.k = 2;
  c.min_capacity = 0;
  c.capacity_factor = 0.5;  // ceil(4 / 3 * 1.0) = 2 slots per expert
  c.top2_2nd_expert_sampling = false;
  const std::vector<int> first = {0, 0, 1, 2}, second = {1, 2, 0, 0};
  const auto logits = logits_for(first, second, 3);
  const Routing r = route(c, logits.data(), 4, true, {});
  EXPECT_EQ(r.capacity, 2);
  // Expert 0: first choices of tokens 0, 1 fill it, so tokens 2 and 3's second choices drop.
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 0, 1, 2, 1, 2, -1, -1}));
  EXPECT_EQ(r.slot, (std::vector<int32_t>{0, 1, 0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(r.expert_counts, (std::vector<int64_t>{4, 2, 2}));
  EXPECT_EQ(r.dropped, 2);
  // A token whose second route dropped gives its whole weight to the first.
  EXPECT_FLOAT_EQ(r.weight[2], 1.0f);
  EXPECT_FLOAT_EQ(r.weight[3], 1.0f);
  EXPECT_NEAR(r.weight[0] + r.weight[4], 1.0f, 1e-6f);
  EXPECT_GT(r.weight[0], r.weight[4]);
}

TEST(MoeGating, WithoutDropTokensTheCapacityIsTheLargestLoadTheGroupAgrees) {
  GatingConfig c;
  c.num_experts = 2;
  c.k = 1;
  c.drop_tokens = false;
  c.use_rts = false;
  const std::vector<int> prefer = {0, 0, 1, 0, 0, 0, 1, 0};
  const auto logits = logits_for(prefer, {}, 2);
  int64_t offered = -1;
  const Routing r = route(c, logits.data(), 8, false, {}, [&](int64_t mine) {
    offered = mine;
    return int64_t{7};  // another rank of the group holds 7
  });
  EXPECT_EQ(offered, 6);
  EXPECT_EQ(r.capacity, 7);
  EXPECT_EQ(r.dropped, 0);
}

TEST(MoeGating, DroplessTopKKeepsEveryRouteAndRenormalisesOnRequest) {
  GatingConfig c;
  c.router = Router::kDroplessTopK;
  c.num_experts = 4;
  c.k = 2;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> logits(6 * 4);
  for (float& x : logits) x = normal(rng);
  const Routing r = route(c, logits.data(), 6, true, {});
  EXPECT_EQ(r.dropped, 0);
  for (int s = 0; s < 6; ++s) {
    EXPECT_NEAR(r.weight[s] + r.weight[6 + s], 1.0f, 1e-6f);
    EXPECT_GE(r.weight[s], r.weight[6 + s]);  // route 0 is the larger gate
  }
  c.norm_topk_prob = false;
  const Routing raw = route(c, logits.data(), 6, true, {});
  for (int s = 0; s < 6; ++s) EXPECT_FLOAT_EQ(raw.weight[s], raw.gates[s * 4 + raw.expert[s]]);
  int64_t slots = 0;
  for (int64_t n : r.expert_counts) slots += n;
  EXPECT_EQ(slots, 12);
}

TEST(MoeGating, ConfigErrorsNameTheField) {
  GatingConfig c;
  c.k = 9;
  EXPECT_NE(gating_error(c).find("k (9)"), std::string::npos);
  c.k = 2;
  c.noisy_gate_policy = NoisyGate::kRSample;
  EXPECT_NE(gating_error(c).find("RSample"), std::string::npos);
  c.noisy_gate_policy = NoisyGate::kNone;
  EXPECT_EQ(gating_error(c), "");
}

// sum(weight * R) + a * aux_loss, in double, for fixed choices.
double objective(const GatingConfig& c, const std::vector<float>& logits, int64_t S,
                 const std::vector<float>& R, float a, const Routing& reference) {
  const Routing r = route(c, logits.data(), S, true, {});
  EXPECT_EQ(r.expert, reference.expert);  // the perturbation moved no route
  double sum = a * static_cast<double>(r.aux_loss);
  for (size_t i = 0; i < R.size(); ++i) sum += static_cast<double>(r.weight[i]) * R[i];
  return sum;
}

void expect_backward(GatingConfig c, int64_t S, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> logits(static_cast<size_t>(S * c.num_experts));
  for (float& x : logits) x = 2.0f * normal(rng);
  std::vector<float> R(static_cast<size_t>(S * c.k));
  for (float& x : R) x = normal(rng);
  const float a = 0.7f;
  const Routing r = route(c, logits.data(), S, true, {});
  std::vector<float> dlogits(logits.size());
  route_backward(c, r, R.data(), a, dlogits.data());
  const float h = 1e-2f;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float keep = logits[i];
    logits[i] = keep + h;
    const double up = objective(c, logits, S, R, a, r);
    logits[i] = keep - h;
    const double down = objective(c, logits, S, R, a, r);
    logits[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(dlogits[i], numeric, 2e-3 * std::max(1.0, std::abs(numeric))) << i;
  }
}

TEST(MoeGating, BackwardMatchesFiniteDifferences) {
  GatingConfig c;
  c.num_experts = 4;
  c.min_capacity = 0;
  c.use_rts = false;
  c.top2_2nd_expert_sampling = false;
  c.capacity_factor = 0.75;  // some routes drop
  for (int64_t k : {1, 2, 3}) {
    SCOPED_TRACE(k);
    c.k = k;
    expect_backward(c, 12, 11 + static_cast<uint32_t>(k));
  }
  c.router = Router::kDroplessTopK;
  c.k = 2;
  for (bool norm : {true, false}) {
    SCOPED_TRACE(norm);
    c.norm_topk_prob = norm;
    expect_backward(c, 9, 5);
  }
}

}  // namespace
}  // namespace dscore::transformer::moe
