// Mixture-of-Experts routing: which experts each token goes to, at which
// slot of the expert's capacity buffer, with which combine weight, and the
// load-balancing auxiliary loss, from the gate's logits (S tokens x E
// experts, fp32). Two families:
//
//   DeepSpeed-MoE (deepspeed.moe.sharded_moe top1gating / top2gating /
//   topkgating, as TopKGate calls them): softmax gates, a per-expert
//   capacity ceil(S / E * capacity_factor * k) (at least min_capacity) or,
//   without drop_tokens, the largest expert load; routes past the capacity
//   are dropped (top-1: the `capacity` tokens of highest random priority
//   under use_rts; top-2: by position, second choices after all first
//   choices; top-k: by gate value or position, drop_policy).
//   Dropless top-k (Mixtral, Qwen-MoE): every route kept, the weights the
//   top-k softmax gates, renormalised with norm_topk_prob.
//
// The random draws DeepSpeed makes inside (Gumbel noise for RSample and
// top-2's second-expert sampling, RTS priorities) are inputs here
// (GatingNoise), so training draws them from a seeded stream keyed by the
// token (moe/noise.h) and a check hands DeepSpeed and dscore the same ones.
// Everything is computed in fp32 as DeepSpeed does, in the same order where
// the order decides a choice (capacity, argmax's first-index ties).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dscore::transformer::moe {

enum class NoisyGate { kNone, kRSample, kJitter };  // DeepSpeed's noisy_gate_policy
enum class DropPolicy { kProbs, kPosition };        // topkgating's drop_policy (k > 2)
enum class Router { kDeepSpeed, kDroplessTopK };    // the two families above

struct GatingConfig {
  Router router = Router::kDeepSpeed;
  int64_t num_experts = 8;
  int64_t k = 1;
  double capacity_factor = 1.0;       // training
  double eval_capacity_factor = 1.0;  // forward only
  int64_t min_capacity = 8;
  bool drop_tokens = true;
  bool use_rts = true;  // top-1: random token selection
  NoisyGate noisy_gate_policy = NoisyGate::kNone;
  bool top2_2nd_expert_sampling = true;  // top-2: Gumbel noise picks the second expert
  DropPolicy drop_policy = DropPolicy::kProbs;
  bool norm_topk_prob = true;  // dropless: weights renormalised over the k
};

// "" when the config can route, else what is wrong (the field and the fix).
std::string gating_error(const GatingConfig& config);

// S x E draws, row-major like the logits; null where the config does not use them.
struct GatingNoise {
  const float* gumbel = nullptr;   // RSample (top-1, training) and top-2 sampling (training)
  const float* uniform = nullptr;  // RTS priorities in [0, 1) (top-1, use_rts)
};
// Which draws route() reads for this config and mode. As DeepSpeed's
// TopKGate: RSample in training only; RTS and top-2's sampling in
// evaluation too.
// Slots per expert with drop_tokens for `tokens` tokens: DeepSpeed's
// ceil(tokens / E * factor * k) in fp32, at least min_capacity (factor:
// capacity_factor in training, eval_capacity_factor otherwise).
int64_t drop_capacity(const GatingConfig& config, int64_t tokens, bool training);
bool needs_gumbel(const GatingConfig& config, bool training);
bool needs_uniform(const GatingConfig& config, bool training);

// The routes of S tokens, route-major: route j of token s at [j * S + s]
// (DeepSpeed's sparse routes). A dropped route has expert -1, slot 0 and
// weight 0.
struct Routing {
  int64_t tokens = 0, k = 0, experts = 0;
  int64_t capacity = 0;  // slots per expert (dropless: the largest load)
  std::vector<int32_t> expert;
  std::vector<int32_t> slot;
  std::vector<double> weight;  // Real's values
  // Routes per expert as chosen, before any drop (DeepSpeed's exp_counts).
  std::vector<int64_t> expert_counts;
  int64_t dropped = 0;  // routes dropped for capacity
  double aux_loss = 0;  // l_aux (its coefficient is the caller's)
  // Kept for backward: the softmax gates (S x E), the chosen experts of
  // every route before drops, and the first-choice loads (aux loss).
  std::vector<double> gates;
  std::vector<int32_t> chosen;
  std::vector<double> load_fraction;  // d aux_loss / d (expert e's mean gate)
};

// The arithmetic is in Real (float: DeepSpeed's fp32, bit for bit where
// the order allows; double: the finite-difference checks), the results
// kept as double. `agree_capacity` (optional): without drop_tokens the
// capacity is the largest load over the expert-parallel group
// (DeepSpeed's all_reduce MAX); it gets this rank's and returns the group's.
template <class Real>
Routing route(const GatingConfig& config, const Real* logits, int64_t tokens, bool training,
              const GatingNoise& noise,
              const std::function<int64_t(int64_t)>& agree_capacity = nullptr);

// d(logits) (S x E, overwritten) from d(weight) (the routes' order) and
// d(aux_loss), accumulated in double. The noise and the choices are constants.
template <class Real>
void route_backward(const GatingConfig& config, const Routing& routing, const Real* dweight,
                    double daux, Real* dlogits);

}  // namespace dscore::transformer::moe
