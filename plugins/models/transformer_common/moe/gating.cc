#include "gating.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace dscore::transformer::moe {
namespace {

constexpr float kEps = std::numeric_limits<float>::epsilon();  // torch.finfo(float32).eps

// Row-wise softmax in Real (max subtracted, as torch does), kept as double.
template <class Real>
std::vector<double> softmax_rows(const Real* logits, int64_t S, int64_t E) {
  std::vector<double> gates(static_cast<size_t>(S * E));
  std::vector<Real> g(static_cast<size_t>(E));
  for (int64_t s = 0; s < S; ++s) {
    const Real* x = logits + s * E;
    const Real max = *std::max_element(x, x + E);
    Real sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += g[e] = std::exp(x[e] - max);
    const Real inv = Real(1) / sum;
    for (int64_t e = 0; e < E; ++e) gates[s * E + e] = g[e] * inv;
  }
  return gates;
}

// torch.argmax: the first index of the largest value (-1 skips an index).
template <class Value>
int32_t argmax(const Value* x, int64_t E, int64_t skip = -1) {
  int32_t best = -1;
  for (int64_t e = 0; e < E; ++e)
    if (e != skip && (best < 0 || x[e] > x[best])) best = static_cast<int32_t>(e);
  return best;
}

// DeepSpeed's _capacity: ceil((S / E) * factor) in fp32 (the Python float
// S / E meets a float32 tensor), at least min_capacity.
int64_t capacity_of(int64_t S, int64_t E, float factor, int64_t min_capacity) {
  const float per_expert = static_cast<float>(static_cast<double>(S) / static_cast<double>(E));
  const auto capacity = static_cast<int64_t>(std::ceil(per_expert * factor));
  return std::max(capacity, min_capacity);
}

// me: the mean gate per expert (torch.mean over tokens, in Real).
template <class Real>
std::vector<Real> mean_gates(const std::vector<double>& gates, int64_t S, int64_t E) {
  std::vector<Real> me(static_cast<size_t>(E), Real(0));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t e = 0; e < E; ++e) me[e] += static_cast<Real>(gates[s * E + e]);
  for (Real& m : me) m /= static_cast<Real>(S);
  return me;
}

template <class Real>
struct Aux {
  Real loss = 0;
  std::vector<double> slope;  // d loss / d me_e
};
// scale * sum_e me_e * ce_e, with ce_e = counts_e / S.
template <class Real>
Aux<Real> aux_loss(const std::vector<double>& gates, const std::vector<int64_t>& counts, int64_t S,
                   int64_t E, Real scale) {
  const std::vector<Real> me = mean_gates<Real>(gates, S, E);
  Aux<Real> aux;
  Real sum = 0;
  for (int64_t e = 0; e < E; ++e) {
    const Real ce = static_cast<Real>(counts[e]) / static_cast<Real>(S);
    sum += me[e] * ce;
    aux.slope.push_back(scale * ce);
  }
  aux.loss = sum * scale;
  return aux;
}

Routing empty_routing(const GatingConfig& config, int64_t S) {
  Routing r;
  r.tokens = S;
  r.k = config.k;
  r.experts = config.num_experts;
  const auto n = static_cast<size_t>(S * config.k);
  r.expert.assign(n, -1);
  r.slot.assign(n, 0);
  r.weight.assign(n, 0.0f);
  r.chosen.assign(n, -1);
  r.expert_counts.assign(static_cast<size_t>(config.num_experts), 0);
  return r;
}

// Slots by position: route (j, s) takes its expert's next slot in the order
// of the routes (all first choices, then all second ones, ...); a route
// past `capacity` (when > 0) is dropped.
void place_by_position(Routing& r, int64_t capacity) {
  std::vector<int64_t> next(static_cast<size_t>(r.experts), 0);
  for (size_t i = 0; i < r.chosen.size(); ++i) {
    const int32_t e = r.chosen[i];
    if (e < 0) continue;
    const int64_t location = next[e]++;
    if (capacity > 0 && location >= capacity) continue;
    r.expert[i] = e;
    r.slot[i] = static_cast<int32_t>(location);
  }
}

// The indices of the k largest of values[0, n) as torch.topk picks them on
// the CPU (ATen's native TopK implementation): std::partial_sort of (value, index) pairs
// when k * 64 <= n, else std::nth_element and a sort of the first k - 1.
// Its choice among equal values (DeepSpeed's top-1 capacity without RTS
// ranks 0/1 masks) follows those algorithms, so dscore runs the same ones
// to drop the same tokens. Descending, as torch's sorted=True.
std::vector<int64_t> torch_topk(const std::vector<double>& values, int64_t k) {
  using Elem = std::pair<double, int64_t>;
  std::vector<Elem> queue(values.size());
  for (size_t j = 0; j < values.size(); ++j) queue[j] = {values[j], static_cast<int64_t>(j)};
  const auto greater = [](const Elem& x, const Elem& y) { return x.first > y.first; };
  if (k * 64 <= static_cast<int64_t>(queue.size())) {
    std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), greater);
  } else {
    std::nth_element(queue.begin(), queue.begin() + k - 1, queue.end(), greater);
    std::sort(queue.begin(), queue.begin() + k - 1, greater);
  }
  std::vector<int64_t> top(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) top[j] = queue[j].second;
  return top;
}

// Per expert, keep the `capacity` routed tokens of highest priority
// (DeepSpeed's topk over the expert's column of masked priorities: 0 for
// tokens routed elsewhere), then number the kept tokens of each expert in
// token order (cumsum - 1).
void place_by_priority(Routing& r, int64_t capacity, const std::vector<double>& priority) {
  const int64_t S = r.tokens, E = r.experts;
  std::vector<char> kept(r.chosen.size(), 0);
  std::vector<double> column(static_cast<size_t>(S));
  std::vector<int64_t> route_of(static_cast<size_t>(S));
  for (int64_t e = 0; e < E; ++e) {
    std::fill(column.begin(), column.end(), 0.0);
    std::fill(route_of.begin(), route_of.end(), -1);
    int64_t routed = 0;
    for (size_t i = 0; i < r.chosen.size(); ++i) {
      if (r.chosen[i] != e) continue;
      const int64_t s = static_cast<int64_t>(i) % S;
      column[s] = priority[i];
      route_of[s] = static_cast<int64_t>(i);
      ++routed;
    }
    if (routed <= capacity) {  // every routed token fits
      for (int64_t s = 0; s < S; ++s)
        if (route_of[s] >= 0) kept[route_of[s]] = 1;
      continue;
    }
    for (int64_t s : torch_topk(column, std::min(capacity, S)))
      if (route_of[s] >= 0) kept[route_of[s]] = 1;
  }
  std::vector<int64_t> next(static_cast<size_t>(E), 0);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < r.k; ++j) {
      const size_t i = static_cast<size_t>(j * S + s);
      if (!kept[i]) continue;
      r.expert[i] = r.chosen[i];
      r.slot[i] = static_cast<int32_t>(next[r.chosen[i]]++);
    }
}

// Combine weights: each kept route's gate, divided by the kept gates' sum
// over the token's routes when `normalise` (clamped at eps when `clamp`).
template <class Real>
void set_weights(Routing& r, bool normalise, bool clamp) {
  const int64_t S = r.tokens, E = r.experts;
  for (int64_t s = 0; s < S; ++s) {
    Real sum = 0;
    for (int64_t j = 0; j < r.k; ++j) {
      const size_t i = static_cast<size_t>(j * S + s);
      if (r.expert[i] >= 0) sum += static_cast<Real>(r.gates[s * E + r.expert[i]]);
    }
    const Real denom = clamp ? std::max(sum, Real(kEps)) : sum;
    for (int64_t j = 0; j < r.k; ++j) {
      const size_t i = static_cast<size_t>(j * S + s);
      if (r.expert[i] < 0) continue;
      const auto g = static_cast<Real>(r.gates[s * E + r.expert[i]]);
      r.weight[i] = normalise ? g / denom : g;
    }
  }
}

void count_routes(Routing& r) {
  for (int32_t e : r.chosen)
    if (e >= 0) ++r.expert_counts[e];
}

int64_t largest(const std::vector<int64_t>& counts,
                const std::function<int64_t(int64_t)>& agree_capacity) {
  const int64_t mine = *std::max_element(counts.begin(), counts.end());
  return agree_capacity ? agree_capacity(mine) : mine;
}

template <class Real>
Routing top1(const GatingConfig& c, const Real* logits, int64_t S, bool training,
             const GatingNoise& noise, const std::function<int64_t(int64_t)>& agree) {
  const int64_t E = c.num_experts;
  Routing r = empty_routing(c, S);
  r.gates = softmax_rows(logits, S, E);
  int64_t capacity = drop_capacity(c, S, training);
  const bool rsample = training && c.noisy_gate_policy == NoisyGate::kRSample;
  std::vector<Real> noisy(static_cast<size_t>(E));
  for (int64_t s = 0; s < S; ++s) {
    if (rsample) {
      for (int64_t e = 0; e < E; ++e) noisy[e] = logits[s * E + e] + noise.gumbel[s * E + e];
      r.chosen[s] = argmax(noisy.data(), E);
    } else {
      r.chosen[s] = argmax(r.gates.data() + s * E, E);
    }
  }
  count_routes(r);  // the loads before any drop
  if (!c.drop_tokens) capacity = std::min(largest(r.expert_counts, agree), S);
  const Aux<Real> aux = aux_loss(r.gates, r.expert_counts, S, E, static_cast<Real>(E));
  r.aux_loss = aux.loss;
  r.load_fraction = aux.slope;
  // Random token selection: a uniform priority per routed token; without
  // it, every routed token has priority 1 and the earlier ones stay.
  std::vector<double> priority(static_cast<size_t>(S), 1.0);
  if (needs_uniform(c, training))
    for (int64_t s = 0; s < S; ++s) priority[s] = noise.uniform[s * E + r.chosen[s]];
  place_by_priority(r, std::min(capacity, S), priority);
  r.capacity = capacity;
  set_weights<Real>(r, /*normalise=*/false, /*clamp=*/false);
  return r;
}

template <class Real>
Routing top2(const GatingConfig& c, const Real* logits, int64_t S, bool training,
             const GatingNoise& noise, const std::function<int64_t(int64_t)>& agree) {
  const int64_t E = c.num_experts;
  Routing r = empty_routing(c, S);
  r.gates = softmax_rows(logits, S, E);
  // DeepSpeed's TopKGate passes top2_2nd_expert_sampling in training and
  // evaluation alike.
  (void)training;
  std::vector<Real> noisy(static_cast<size_t>(E));
  for (int64_t s = 0; s < S; ++s) {
    const int32_t first = argmax(r.gates.data() + s * E, E);
    for (int64_t e = 0; e < E; ++e)
      noisy[e] =
          logits[s * E + e] +
          (c.top2_2nd_expert_sampling ? static_cast<Real>(noise.gumbel[s * E + e]) : Real(0));
    r.chosen[s] = first;
    r.chosen[S + s] = argmax(noisy.data(), E, first);
  }
  count_routes(r);
  std::vector<int64_t> first_counts(static_cast<size_t>(E), 0);
  for (int64_t s = 0; s < S; ++s) ++first_counts[r.chosen[s]];
  // l_aux = mean_e(me * ce) * E * E, ce of the first choices.
  const Aux<Real> aux = aux_loss(r.gates, first_counts, S, E, Real(1));
  const auto fe = static_cast<Real>(E);
  r.aux_loss = aux.loss / fe * fe * fe;
  for (double slope : aux.slope) r.load_fraction.push_back(slope * static_cast<double>(E));
  const int64_t capacity =
      c.drop_tokens ? drop_capacity(c, S, training) : largest(r.expert_counts, agree);
  place_by_position(r, c.drop_tokens ? capacity : 0);
  r.capacity = capacity;
  set_weights<Real>(r, /*normalise=*/true, /*clamp=*/true);
  return r;
}

// The k largest of a row, descending, as torch.topk(dim=1) orders them.
std::vector<int32_t> top_k(const double* x, int64_t E, int64_t k) {
  const std::vector<int64_t> top = torch_topk(std::vector<double>(x, x + E), k);
  return std::vector<int32_t>(top.begin(), top.end());
}

// Softmax gates and each token's k largest as its routes (chosen, counted).
template <class Real>
Routing top_k_routes(const GatingConfig& c, const Real* logits, int64_t S) {
  const int64_t E = c.num_experts, K = c.k;
  Routing r = empty_routing(c, S);
  r.gates = softmax_rows(logits, S, E);
  for (int64_t s = 0; s < S; ++s) {
    const std::vector<int32_t> best = top_k(r.gates.data() + s * E, E, K);
    for (int64_t j = 0; j < K; ++j) r.chosen[j * S + s] = best[j];
  }
  count_routes(r);
  return r;
}

template <class Real>
Routing topk(const GatingConfig& c, const Real* logits, int64_t S, bool training,
             const std::function<int64_t(int64_t)>& agree) {
  const int64_t E = c.num_experts, K = c.k;
  Routing r = top_k_routes(c, logits, S);
  const Aux<Real> aux = aux_loss(r.gates, r.expert_counts, S, E, Real(1));
  const auto fe = static_cast<Real>(E), fk = static_cast<Real>(K);
  r.aux_loss = aux.loss / fe * fe * fe / fk;
  for (double slope : aux.slope)
    r.load_fraction.push_back(slope * static_cast<double>(E) / static_cast<double>(K));
  if (!c.drop_tokens) {
    r.capacity = largest(r.expert_counts, agree);
    place_by_priority(r, S * K, std::vector<double>(r.chosen.size(), 1.0));
  } else {
    r.capacity = drop_capacity(c, S, training);
    if (c.drop_policy == DropPolicy::kPosition) {
      // Locations count a token's routes in token order (cumsum over the mask).
      std::vector<double> order(r.chosen.size(), 1.0);
      place_by_priority(r, S * K, order);
      for (size_t i = 0; i < r.expert.size(); ++i)
        if (r.expert[i] >= 0 && r.slot[i] >= r.capacity) r.expert[i] = -1, r.slot[i] = 0;
    } else {
      std::vector<double> priority(r.chosen.size());
      for (size_t i = 0; i < r.chosen.size(); ++i)
        priority[i] = r.gates[static_cast<int64_t>(i) % S * E + r.chosen[i]];
      place_by_priority(r, std::min(r.capacity, S), priority);
    }
  }
  set_weights<Real>(r, /*normalise=*/true, /*clamp=*/true);
  return r;
}

template <class Real>
Routing dropless(const GatingConfig& c, const Real* logits, int64_t S,
                 const std::function<int64_t(int64_t)>& agree) {
  const int64_t E = c.num_experts;
  Routing r = top_k_routes(c, logits, S);
  // transformers' load_balancing_loss_func: E * sum_e (routes_e / S) * me_e.
  const Aux<Real> aux = aux_loss(r.gates, r.expert_counts, S, E, static_cast<Real>(E));
  r.aux_loss = aux.loss;
  r.load_fraction = aux.slope;
  r.capacity = largest(r.expert_counts, agree);
  place_by_position(r, 0);
  set_weights<Real>(r, c.norm_topk_prob, /*clamp=*/false);
  return r;
}

}  // namespace

std::string gating_error(const GatingConfig& c) {
  if (c.num_experts < 1) return "num_experts must be at least 1";
  if (c.k < 1 || c.k > c.num_experts)
    return "k (" + std::to_string(c.k) + ") must be between 1 and num_experts (" +
           std::to_string(c.num_experts) + ")";
  if (c.router == Router::kDeepSpeed) {
    if (!(c.capacity_factor > 0) || !(c.eval_capacity_factor > 0))
      return "capacity_factor and eval_capacity_factor must be positive";
    if (c.min_capacity < 0) return "min_capacity must be 0 or more";
    if (c.noisy_gate_policy == NoisyGate::kRSample && c.k != 1)
      return "noisy_gate_policy \"RSample\" applies to top-1 gating only (DeepSpeed ignores it "
             "for k > 1): set k to 1 or the policy to null";
  }
  return "";
}

int64_t drop_capacity(const GatingConfig& config, int64_t tokens, bool training) {
  const double factor = training ? config.capacity_factor : config.eval_capacity_factor;
  return capacity_of(tokens, config.num_experts,
                     static_cast<float>(factor * static_cast<double>(config.k)),
                     config.min_capacity);
}

bool needs_gumbel(const GatingConfig& c, bool training) {
  if (c.router != Router::kDeepSpeed) return false;
  if (c.k == 1) return training && c.noisy_gate_policy == NoisyGate::kRSample;
  return c.k == 2 && c.top2_2nd_expert_sampling;
}

bool needs_uniform(const GatingConfig& c, bool training) {
  (void)training;  // DeepSpeed's TopKGate passes use_rts in evaluation too
  return c.router == Router::kDeepSpeed && c.k == 1 && c.use_rts;
}

template <class Real>
Routing route(const GatingConfig& config, const Real* logits, int64_t tokens, bool training,
              const GatingNoise& noise, const std::function<int64_t(int64_t)>& agree_capacity) {
  if ((needs_gumbel(config, training) && noise.gumbel == nullptr) ||
      (needs_uniform(config, training) && noise.uniform == nullptr))
    throw std::invalid_argument("moe routing: the gating config draws noise it was not given");
  Routing r = config.router == Router::kDroplessTopK
                  ? dropless(config, logits, tokens, agree_capacity)
              : config.k == 1 ? top1(config, logits, tokens, training, noise, agree_capacity)
              : config.k == 2 ? top2(config, logits, tokens, training, noise, agree_capacity)
                              : topk(config, logits, tokens, training, agree_capacity);
  for (int32_t e : r.expert) r.dropped += e < 0 ? 1 : 0;
  return r;
}

template <class Real>
void route_backward(const GatingConfig& config, const Routing& r, const Real* dweight, double daux,
                    Real* dlogits) {
  const int64_t S = r.tokens, E = r.experts, K = r.k;
  const bool normalised = config.router == Router::kDroplessTopK
                              ? config.norm_topk_prob
                              : config.k > 1;  // top-1's weight is its gate
  const bool clamp = config.router == Router::kDeepSpeed;
  std::vector<double> dgates(static_cast<size_t>(E));
  for (int64_t s = 0; s < S; ++s) {
    // The aux loss: d/d g[s, e] = slope_e / S.
    for (int64_t e = 0; e < E; ++e) dgates[e] = daux * r.load_fraction[e] / static_cast<double>(S);
    // The weights: w_j = G_j / D over the kept routes (D their sum, clamped).
    double sum = 0, dot = 0;
    for (int64_t j = 0; j < K; ++j) {
      const size_t i = static_cast<size_t>(j * S + s);
      if (r.expert[i] < 0) continue;
      sum += r.gates[s * E + r.expert[i]];
      dot += static_cast<double>(dweight[i]) * r.weight[i];
    }
    const bool clamped = clamp && sum < kEps;
    const double denom = clamped ? kEps : sum;
    for (int64_t j = 0; j < K; ++j) {
      const size_t i = static_cast<size_t>(j * S + s);
      if (r.expert[i] < 0) continue;
      dgates[r.expert[i]] += normalised ? (dweight[i] - (clamped ? 0.0 : dot)) / denom : dweight[i];
    }
    // Softmax (accumulated in double): dlogits = g * (dg - sum(dg * g)).
    const double* g = r.gates.data() + s * E;
    double inner = 0;
    for (int64_t e = 0; e < E; ++e) inner += dgates[e] * g[e];
    for (int64_t e = 0; e < E; ++e)
      dlogits[s * E + e] = static_cast<Real>(g[e] * (dgates[e] - inner));
  }
}

template Routing route<float>(const GatingConfig&, const float*, int64_t, bool, const GatingNoise&,
                              const std::function<int64_t(int64_t)>&);
template Routing route<double>(const GatingConfig&, const double*, int64_t, bool,
                               const GatingNoise&, const std::function<int64_t(int64_t)>&);
template void route_backward<float>(const GatingConfig&, const Routing&, const float*, double,
                                    float*);
template void route_backward<double>(const GatingConfig&, const Routing&, const double*, double,
                                     double*);

}  // namespace dscore::transformer::moe
