#include "core/autotune/tuner.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace dscore::autotune {
namespace {

// How strongly the fit is held toward the prior rates: the weight of one
// measured trial against each term's prior.
constexpr double kPriorStrength = 1e-3;

// Solves a x = b (n x n, n small) by Gaussian elimination with partial
// pivoting; a singular system keeps x as given.
template <size_t N>
void solve(std::array<std::array<double, N>, N> a, std::array<double, N> b,
           std::array<double, N>* x) {
  for (size_t col = 0; col < N; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < N; ++r)
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    if (std::abs(a[pivot][col]) < 1e-12) return;
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (size_t r = col + 1; r < N; ++r) {
      const double f = a[r][col] / a[col][col];
      for (size_t c = col; c < N; ++c) a[r][c] -= f * a[col][c];
      b[r] -= f * b[col];
    }
  }
  for (size_t i = N; i-- > 0;) {
    double s = b[i];
    for (size_t c = i + 1; c < N; ++c) s -= a[i][c] * (*x)[c];
    (*x)[i] = s / a[i][i];
  }
}

}  // namespace

StepTimeModel::StepTimeModel()
    : prior_{1 / 50e9, 1 / 2e9, 1 / 1e9, 1e-3, 5e-3}, weight_{1, 1, 1, 1, 1} {}

std::array<double, StepTimeModel::kTerms> StepTimeModel::terms(const StepFeatures& f) const {
  return {f.flops * prior_[0], f.comm_bytes * prior_[1], f.disk_bytes * prior_[2],
          f.micro_steps * prior_[3], prior_[4]};
}

double StepTimeModel::predict_seconds(const StepFeatures& f) const {
  const auto t = terms(f);
  double s = 0;
  for (size_t i = 0; i < kTerms; ++i) s += weight_[i] * t[i];
  return s;
}

void StepTimeModel::add_measurement(const StepFeatures& f, double seconds) {
  if (!(seconds > 0)) return;
  seen_.emplace_back(terms(f), seconds);
  refit();
}

// Minimizes sum_i (sum_j w_j t_ij / s_i - 1)^2 + k sum_j (w_j - 1)^2: each
// trial's relative error, held toward the prior rates (w = 1).
void StepTimeModel::refit() {
  std::array<std::array<double, kTerms>, kTerms> a{};
  std::array<double, kTerms> b{};
  for (size_t j = 0; j < kTerms; ++j) {
    a[j][j] = kPriorStrength;
    b[j] = kPriorStrength;
  }
  for (const auto& [t, seconds] : seen_) {
    for (size_t j = 0; j < kTerms; ++j) {
      const double gj = t[j] / seconds;
      b[j] += gj;
      for (size_t k = 0; k < kTerms; ++k) a[j][k] += gj * t[k] / seconds;
    }
  }
  std::array<double, kTerms> w = weight_;
  solve(a, b, &w);
  for (size_t j = 0; j < kTerms; ++j) weight_[j] = std::max(0.01, w[j]);
}

Metric metric_from_name(const std::string& name) {
  if (name == "latency") return Metric::kLatency;
  if (name == "flops") return Metric::kFlops;
  return Metric::kThroughput;
}

const char* metric_unit(Metric metric) {
  switch (metric) {
    case Metric::kLatency:
      return "s/step";
    case Metric::kFlops:
      return "FLOP/s";
    case Metric::kThroughput:
      break;
  }
  return "samples/s";
}

bool better(Metric metric, double a, double b) {
  return metric == Metric::kLatency ? a < b : a > b;
}

Tuner::Tuner(const std::string& type, uint64_t seed, int64_t max_trials, int64_t early_stopping,
             std::vector<StepFeatures> features, Metric metric, double flops_scale)
    : type_(type),
      max_trials_(max_trials),
      early_stopping_(early_stopping),
      features_(std::move(features)),
      metric_(metric),
      flops_scale_(flops_scale),
      done_(features_.size(), false) {
  order_.resize(features_.size());
  std::iota(order_.begin(), order_.end(), size_t{0});
  if (type_ == "random") {
    std::mt19937_64 rng(seed);
    std::shuffle(order_.begin(), order_.end(), rng);
  }
}

double Tuner::predicted_metric(size_t index) const {
  const StepFeatures& f = features_[index];
  const double seconds = model_.predict_seconds(f);
  const double throughput = static_cast<double>(f.samples) / seconds;
  switch (metric_) {
    case Metric::kLatency:
      return seconds;
    case Metric::kFlops:
      return throughput * flops_scale_;
    case Metric::kThroughput:
      break;
  }
  return throughput;
}

std::optional<double> Tuner::predicted(size_t index) const {
  if (type_ != "model_based") return std::nullopt;
  return predicted_metric(index);
}

std::optional<size_t> Tuner::next() {
  if (!stop_reason_.empty()) return std::nullopt;
  if (trials_ >= max_trials_) {
    stop_reason_ = "tuner_num_trials (" + std::to_string(max_trials_) + ") reached";
    return std::nullopt;
  }
  if (best_ && since_best_ >= early_stopping_) {
    stop_reason_ = std::to_string(since_best_) +
                   " trials in a row without a better metric (tuner_early_stopping)";
    return std::nullopt;
  }
  std::optional<size_t> pick;
  if (type_ == "model_based") {
    for (size_t i = 0; i < features_.size(); ++i) {
      if (done_[i]) continue;
      if (!pick || better(metric_, predicted_metric(i), predicted_metric(*pick))) pick = i;
    }
  } else {
    for (size_t i : order_)
      if (!done_[i]) {
        pick = i;
        break;
      }
  }
  if (!pick) stop_reason_ = "every candidate ran";
  return pick;
}

void Tuner::record(size_t index, std::optional<double> step_seconds, std::optional<double> metric) {
  done_[index] = true;
  ++trials_;
  if (step_seconds) model_.add_measurement(features_[index], *step_seconds);
  if (metric && (!best_ || better(metric_, *metric, *best_))) {
    best_ = metric;
    since_best_ = 0;
  } else {
    ++since_best_;
  }
}

}  // namespace dscore::autotune
