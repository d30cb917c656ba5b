// moe/gating.h as a filter for tests/external/deepspeed/check_moe_gating.py:
// reads one routing problem (whitespace-separated, in this order) from
// stdin and prints the routes and the logits' gradient.
//
//   router(0 DeepSpeed, 1 dropless) k E S training capacity_factor
//   eval_capacity_factor min_capacity drop_tokens use_rts
//   noisy(0 none, 1 RSample, 2 Jitter) top2_sampling drop_policy(0 probs,
//   1 position) norm_topk_prob
//   logits (S x E)
//   has_gumbel [S x E]   has_uniform [S x E]
//   dweight (k x S, the routes' order)   daux
//
// Prints "capacity C", "aux A", "dropped D", then "counts", "expert",
// "slot", "weight" and "dlogits" each followed by their values.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "transformer_common/moe/gating.h"

namespace moe = dscore::transformer::moe;

namespace {

std::vector<float> read_floats(size_t n) {
  std::vector<float> v(n);
  for (float& x : v) std::cin >> x;
  return v;
}

std::vector<float> read_optional(size_t n) {
  int present = 0;
  std::cin >> present;
  return present ? read_floats(n) : std::vector<float>{};
}

template <class V>
void print(const char* name, const V& values) {
  std::cout << name;
  for (const auto& v : values) std::cout << ' ' << v;
  std::cout << '\n';
}

}  // namespace

int main() {
  moe::GatingConfig c;
  int router = 0, training = 0, drop = 0, rts = 0, noisy = 0, sampling = 0, policy = 0, norm = 0;
  int64_t S = 0;
  std::cin >> router >> c.k >> c.num_experts >> S >> training >> c.capacity_factor >>
      c.eval_capacity_factor >> c.min_capacity >> drop >> rts >> noisy >> sampling >> policy >>
      norm;
  if (!std::cin) {
    std::cerr << "moe_gating_tool: malformed header\n";
    return 2;
  }
  c.router = router ? moe::Router::kDroplessTopK : moe::Router::kDeepSpeed;
  c.drop_tokens = drop != 0;
  c.use_rts = rts != 0;
  c.noisy_gate_policy = static_cast<moe::NoisyGate>(noisy);
  c.top2_2nd_expert_sampling = sampling != 0;
  c.drop_policy = policy ? moe::DropPolicy::kPosition : moe::DropPolicy::kProbs;
  c.norm_topk_prob = norm != 0;
  if (const std::string error = moe::gating_error(c); !error.empty()) {
    std::cerr << "moe_gating_tool: " << error << "\n";
    return 2;
  }
  const auto cells = static_cast<size_t>(S * c.num_experts);
  const std::vector<float> logits = read_floats(cells);
  const std::vector<float> gumbel = read_optional(cells);
  const std::vector<float> uniform = read_optional(cells);
  const std::vector<float> dweight = read_floats(static_cast<size_t>(S * c.k));
  float daux = 0;
  std::cin >> daux;
  if (!std::cin) {
    std::cerr << "moe_gating_tool: the input ends early\n";
    return 2;
  }
  if ((moe::needs_gumbel(c, training) && gumbel.empty()) ||
      (moe::needs_uniform(c, training) && uniform.empty())) {
    std::cerr << "moe_gating_tool: the config draws noise the input does not hold\n";
    return 2;
  }
  const moe::GatingNoise noise{gumbel.empty() ? nullptr : gumbel.data(),
                               uniform.empty() ? nullptr : uniform.data()};
  const moe::Routing r = moe::route(c, logits.data(), S, training != 0, noise);
  std::vector<float> dlogits(cells);
  moe::route_backward(c, r, dweight.data(), daux, dlogits.data());
  std::cout.precision(9);
  std::cout << "capacity " << r.capacity << "\naux " << r.aux_loss << "\ndropped " << r.dropped
            << "\n";
  print("counts", r.expert_counts);
  print("expert", r.expert);
  print("slot", r.slot);
  print("weight", r.weight);
  print("dlogits", dlogits);
  return 0;
}
