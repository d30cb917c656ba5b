// Checks shared by the decoder models' runner tests (gpt, llama): two sets
// of FakeLayers gradients equal bit for bit, or one a multiple of the
// other, and a CPU backend that counts what the runner allocates through it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <dscore/cpp/dtype.hpp>

#include "tests/plugins/models/transformer_common/fake_layers.h"

namespace dscore::transformer::testing {

inline void expect_same_grads(FakeLayers& got, FakeLayers& want, const std::string& what) {
  for (size_t l = 0; l < want.layer_count(); ++l)
    for (size_t i = 0; i < want.param_count(l); ++i)
      for (int64_t e = 0; e < want.numel(l, i); ++e)
        ASSERT_EQ(got.grad<double>(l, i)[e], want.grad<double>(l, i)[e])
            << what << ": layer " << l << " param " << i << " [" << e << "]";
}

// scaled == factor * one, to 1e-9 relative.
inline void expect_scaled_grads(FakeLayers& scaled, FakeLayers& one, double factor) {
  for (size_t l = 0; l < one.layer_count(); ++l)
    for (size_t i = 0; i < one.param_count(l); ++i)
      for (int64_t e = 0; e < one.numel(l, i); ++e)
        EXPECT_NEAR(scaled.grad<double>(l, i)[e], factor * one.grad<double>(l, i)[e],
                    1e-9 * std::max(1.0, std::abs(scaled.grad<double>(l, i)[e])));
}

// Every parameter's gradient against central differences of loss_at():
// about `per_tensor` elements of each tensor, |analytic - numeric| within
// 1e-7 + 1e-5 |numeric|. analytic[l][i] is layer l's parameter i's
// gradient (taken before loss_at runs, which may add into the views).
// `min_largest` > 0: each tensor's largest checked gradient must exceed it
// (a check of near-zero gradients says little). Returns the elements
// checked whose name contains `counted` (all for "").
struct Differences {
  double step = 1e-5;  // the differences' h
  int64_t per_tensor = 7;
  double min_largest = 0;
  std::string counted;
};
inline int expect_finite_differences(FakeLayers& layers, const dscore_model_description& d,
                                     const std::vector<std::vector<std::vector<double>>>& analytic,
                                     const std::function<double()>& loss_at,
                                     const Differences& o = {}) {
  int checked = 0;
  for (size_t l = 0; l < layers.layer_count(); ++l)
    for (size_t i = 0; i < layers.param_count(l); ++i) {
      const std::string name = d.layers[l]->params[i]->name;
      const int64_t n = layers.numel(l, i);
      const int64_t stride = std::max<int64_t>(1, n / o.per_tensor);
      double largest = 0;
      for (int64_t k = 0; k < n; k += stride) {
        double* p = layers.param<double>(l, i) + k;
        const double keep = *p;
        *p = keep + o.step;
        const double up = loss_at();
        *p = keep - o.step;
        const double down = loss_at();
        *p = keep;
        const double numeric = (up - down) / (2 * o.step);
        EXPECT_NEAR(analytic[l][i][static_cast<size_t>(k)], numeric,
                    1e-7 + 1e-5 * std::abs(numeric))
            << name << "[" << k << "]";
        largest = std::max(largest, std::abs(numeric));
        checked += name.find(o.counted) != std::string::npos ? 1 : 0;
      }
      if (o.min_largest > 0) {
        EXPECT_GT(largest, o.min_largest)
            << name << ": its gradient is (nearly) zero, so the check says little";
      }
    }
  return checked;
}

// Every gradient the layers hold, by layer and parameter (a copy).
// A model's pass with each of `checkpoint_blocks` recomputed gives the
// loss and gradients of none, bit for bit. run(blocks, layers): the loss of
// one forward_backward into fresh layers with that many blocks checkpointed.
template <class Run>
void expect_checkpointing_bit_for_bit(const dscore_model_description& d,
                                      const std::vector<int64_t>& checkpoint_blocks, Run&& run) {
  FakeLayers plain(d, DSCORE_DTYPE_F64);
  const double loss = run(int64_t{0}, &plain);
  for (int64_t k : checkpoint_blocks) {
    FakeLayers recomputed(d, DSCORE_DTYPE_F64);
    EXPECT_EQ(run(k, &recomputed), loss);
    expect_same_grads(recomputed, plain, "checkpoint_blocks " + std::to_string(k));
  }
}

inline std::vector<std::vector<std::vector<double>>> grads_of(FakeLayers& layers) {
  std::vector<std::vector<std::vector<double>>> out(layers.layer_count());
  for (size_t l = 0; l < layers.layer_count(); ++l)
    for (size_t i = 0; i < layers.param_count(l); ++i)
      out[l].emplace_back(layers.grad<double>(l, i),
                          layers.grad<double>(l, i) + layers.numel(l, i));
  return out;
}

// f32 and b16 (FakeLayers of fp32 and bf16 over params' model) given the
// same values: params' init times `scale` plus `shift`, rounded to bf16.
template <class Params>
void fill_same_bf16_values(const Params& params, FakeLayers* f32, FakeLayers* b16,
                           float scale = 5.0f, float shift = 0.01f) {
  size_t index = 0;
  for (size_t l = 0; l < f32->layer_count(); ++l)
    for (size_t i = 0; i < f32->param_count(l); ++i, ++index) {
      std::vector<float> v(static_cast<size_t>(f32->numel(l, i)));
      params.init(index, 0, f32->numel(l, i), v.data());
      for (size_t k = 0; k < v.size(); ++k) {
        const uint16_t h = sdk::float_to_bf16(v[k] * scale + shift);
        b16->param<uint16_t>(l, i)[k] = h;
        f32->param<float>(l, i)[k] = sdk::bf16_to_float(h);
      }
    }
}

// A CPU backend counting the bytes the runner allocates through it.
template <class Base>
struct CountedBackend : Base {
  template <typename X>
  typename Base::template Buffer<X> alloc(int64_t n) {
    bytes += static_cast<uint64_t>(n) * sizeof(X);
    return Base::template alloc<X>(n);
  }
  uint64_t bytes = 0;
};

}  // namespace dscore::transformer::testing
