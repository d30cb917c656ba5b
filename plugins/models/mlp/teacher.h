// The synthetic task's target: a fixed random one-hidden-layer tanh network
// (width 32) drawn from teacher_seed, scaled so each output has unit second
// moment on N(0, 1) inputs. The student MLP learns it quickly (loss from ~1
// to well below 0.1 in a few hundred Adam steps).
#pragma once

#include <cstdint>
#include <vector>

namespace dscore::mlp {

class Teacher {
 public:
  static constexpr int64_t kWidth = 32;

  Teacher(uint64_t teacher_seed, int64_t input_dim, int64_t output_dim);

  // y (output_dim) = teacher(x (input_dim)).
  void evaluate(const float* x, float* y) const;

 private:
  void raw(const double* x, double* y) const;

  int64_t input_dim_;
  int64_t output_dim_;
  std::vector<double> w1_;     // (kWidth, input_dim)
  std::vector<double> b1_;     // (kWidth)
  std::vector<double> w2_;     // (output_dim, kWidth)
  std::vector<double> scale_;  // (output_dim): 1 / rms of the raw output
};

}  // namespace dscore::mlp
