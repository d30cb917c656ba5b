// A straightforward dense model of DeepSpeed's 1-bit compressed allreduce
// (docs/deepspeed-reference.md#onebitadam), for the OneBitAdam tests: all W workers' momenta in
// one place, signs as floats (no bit packing, no communication), padding to
// a multiple of W * lcm(W, 8), worker and server error feedback kept between
// calls. The fp32 operations follow the plugin's order, so the result is
// comparable bit for bit; the scales are L2 norms / sqrt(n) taken in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace dscore::testing {

class ReferenceCompression {
 public:
  ReferenceCompression(int world, int64_t n) : world_(world), n_(n) {
    const int64_t unit = world * (world * 8 / std::gcd(world, 8));
    padded_ = (n + unit - 1) / unit * unit;
    chunk_ = padded_ / world;
    reset_errors();
  }
  int64_t padded() const { return padded_; }
  void reset_errors() {
    worker_error_.assign(world_, std::vector<float>(padded_, 0.0f));
    server_error_.assign(world_, std::vector<float>(chunk_, 0.0f));
  }

  // m[w] = worker w's momentum (n elements); returns what every worker's
  // momentum becomes.
  std::vector<float> allreduce(const std::vector<std::vector<float>>& m) {
    std::vector<std::vector<float>> sign(world_, std::vector<float>(padded_));
    std::vector<float> scale(world_);
    for (int w = 0; w < world_; ++w) {
      std::vector<float> x(padded_, 0.0f);
      for (int64_t i = 0; i < n_; ++i) x[i] = m[w][i];
      for (int64_t i = 0; i < padded_; ++i) x[i] += worker_error_[w][i];
      scale[w] = scale_of(x);
      for (int64_t i = 0; i < padded_; ++i) {
        sign[w][i] = x[i] >= 0.0f ? 1.0f : -1.0f;
        worker_error_[w][i] = x[i] - scale[w] * sign[w][i];
      }
    }
    const float inverse_world = static_cast<float>(1.0 / world_);
    std::vector<float> out(n_);
    for (int j = 0; j < world_; ++j) {  // server j owns chunk j
      std::vector<float> y(chunk_, 0.0f);
      for (int w = 0; w < world_; ++w)
        for (int64_t i = 0; i < chunk_; ++i)
          y[i] += sign[w][j * chunk_ + i] * (scale[w] * inverse_world);
      for (int64_t i = 0; i < chunk_; ++i) y[i] += server_error_[j][i];
      const float s = scale_of(y);
      for (int64_t i = 0; i < chunk_; ++i) {
        const float sg = y[i] >= 0.0f ? 1.0f : -1.0f;
        server_error_[j][i] = y[i] - s * sg;
        if (j * chunk_ + i < n_) out[j * chunk_ + i] = s * sg;
      }
    }
    return out;
  }

 private:
  static float scale_of(const std::vector<float>& x) {
    double sum = 0;
    for (float v : x) sum += static_cast<double>(v) * v;
    return static_cast<float>(std::sqrt(sum) / std::sqrt(static_cast<double>(x.size())));
  }
  int world_;
  int64_t n_, padded_ = 0, chunk_ = 0;
  std::vector<std::vector<float>> worker_error_, server_error_;
};

}  // namespace dscore::testing
