// Float-buffer dtype operations: conversions round once to nearest, and
// 16-bit accumulation and scaling compute in fp32.
#include <gtest/gtest.h>

#include <dscore/cpp/dtype.hpp>

#include <stdexcept>
#include <vector>

#include "core/tensor/dtype_ops.h"

namespace dscore::tensor {
namespace {

TEST(DtypeOps, ConvertRoundsToNearestAndAccumulateComputesInFp32) {
  std::vector<float> v = {1.0f, 1.0f + 1.0f / 256, -2.5f, 65504.0f};
  std::vector<uint16_t> bf(4), back_bf(4);
  convert(v.data(), DSCORE_DTYPE_F32, bf.data(), DSCORE_DTYPE_BF16, 4);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(bf[i], sdk::float_to_bf16(v[i]));
  std::vector<uint16_t> h(4);
  convert(v.data(), DSCORE_DTYPE_F32, h.data(), DSCORE_DTYPE_F16, 4);
  std::vector<float> round_trip(4);
  convert(h.data(), DSCORE_DTYPE_F16, round_trip.data(), DSCORE_DTYPE_F32, 4);
  EXPECT_EQ(round_trip[3], 65504.0f);
  accumulate(bf.data(), bf.data(), DSCORE_DTYPE_BF16, 4);  // x + x = 2x exactly
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(sdk::bf16_to_float(bf[i]), 2 * sdk::bf16_to_float(sdk::float_to_bf16(v[i])));
  scale_in_place(v.data(), DSCORE_DTYPE_F32, 4, 0.5);
  EXPECT_EQ(v[2], -1.25f);
}

TEST(DtypeOps, ConvertRejectsNonFloatDtypes) {
  std::vector<int32_t> ints = {1, 2};
  std::vector<float> floats(2);
  EXPECT_THROW(convert(ints.data(), DSCORE_DTYPE_I32, floats.data(), DSCORE_DTYPE_F32, 2),
               std::logic_error);
  // The same dtype is a plain copy, whatever it is.
  std::vector<int32_t> copied(2);
  convert(ints.data(), DSCORE_DTYPE_I32, copied.data(), DSCORE_DTYPE_I32, 2);
  EXPECT_EQ(copied, ints);
}

}  // namespace
}  // namespace dscore::tensor
