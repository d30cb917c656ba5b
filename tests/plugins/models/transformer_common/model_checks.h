// Checks shared by the decoder models' runner tests (gpt, llama): two sets
// of FakeLayers gradients equal bit for bit, or one a multiple of the
// other, and a CPU backend that counts what the runner allocates through it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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
