// Teacher network construction and evaluation (teacher.h). All draws are
// counter-based (<dscore/cpp/counter_rng.hpp>), keyed by teacher_seed and a stream number.
#include "teacher.h"

#include <cmath>

#include <dscore/cpp/counter_rng.hpp>

namespace dscore::mlp {
namespace {

enum Stream : uint64_t { kW1 = 1, kB1 = 2, kW2 = 3, kProbe = 4 };
constexpr int64_t kProbeSamples = 4096;

}  // namespace

Teacher::Teacher(uint64_t seed, int64_t input_dim, int64_t output_dim)
    : input_dim_(input_dim), output_dim_(output_dim) {
  // Hidden pre-activations of std ~0.7 (weights 0.5/sqrt(in), biases 0.5):
  // a smooth but nonlinear target that the default student learns in ~200
  // Adam steps (tests/plugins/models/mlp: final loss ~0.03-0.05).
  const double in_scale = 0.5 / std::sqrt(static_cast<double>(input_dim));
  const double hidden_scale = 1.0 / std::sqrt(static_cast<double>(kWidth));
  for (int64_t k = 0; k < kWidth * input_dim; ++k)
    w1_.push_back(sdk::normal_at(seed, kW1, k) * in_scale);
  for (int64_t k = 0; k < kWidth; ++k) b1_.push_back(0.5 * sdk::normal_at(seed, kB1, k));
  for (int64_t k = 0; k < output_dim * kWidth; ++k)
    w2_.push_back(sdk::normal_at(seed, kW2, k) * hidden_scale);

  // Normalise each output to unit second moment over probe inputs.
  std::vector<double> x(input_dim), y(output_dim), sum_sq(output_dim, 0.0);
  for (int64_t p = 0; p < kProbeSamples; ++p) {
    for (int64_t i = 0; i < input_dim; ++i) x[i] = sdk::normal_at(seed, kProbe, p * input_dim + i);
    raw(x.data(), y.data());
    for (int64_t k = 0; k < output_dim; ++k) sum_sq[k] += y[k] * y[k];
  }
  for (int64_t k = 0; k < output_dim; ++k) {
    double rms = std::sqrt(sum_sq[k] / kProbeSamples);
    scale_.push_back(rms > 0 ? 1.0 / rms : 1.0);
  }
}

void Teacher::raw(const double* x, double* y) const {
  double h[kWidth];
  for (int64_t j = 0; j < kWidth; ++j) {
    double acc = b1_[j];
    for (int64_t i = 0; i < input_dim_; ++i) acc += w1_[j * input_dim_ + i] * x[i];
    h[j] = std::tanh(acc);
  }
  for (int64_t k = 0; k < output_dim_; ++k) {
    double acc = 0;
    for (int64_t j = 0; j < kWidth; ++j) acc += w2_[k * kWidth + j] * h[j];
    y[k] = acc;
  }
}

void Teacher::evaluate(const float* x, float* y) const {
  std::vector<double> xd(x, x + input_dim_), yd(output_dim_);
  raw(xd.data(), yd.data());
  for (int64_t k = 0; k < output_dim_; ++k) y[k] = static_cast<float>(yd[k] * scale_[k]);
}

}  // namespace dscore::mlp
