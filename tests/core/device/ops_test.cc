// core/device/ops.h without a GPU: the CPU target computes exactly what the
// engine's host functions compute (they are its implementation), the
// dispatch checks counts and dtypes for both targets, and a CUDA target
// fails with a message in a build without CUDA.
#include "core/device/ops.h"

#include <gtest/gtest.h>

#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/tensor/dtype_ops.h"
#include "core/tensor/square_sum.h"

namespace dscore::device::ops {
namespace {

constexpr dscore_dtype kFloats[] = {DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16};

// n elements of `dtype` as bytes: normal values with a spread of
// magnitudes and, unless `finite`, an infinity and a NaN.
std::vector<char> random_buffer(dscore_dtype dtype, int64_t n, uint32_t seed, bool finite) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    values[static_cast<size_t>(i)] = normal(rng) * (i % 5 == 0 ? 5e3f : i % 7 == 0 ? 1e-6f : 1.0f);
  if (n > 10 && !finite) {
    values[3] = std::numeric_limits<float>::infinity();
    values[9] = std::numeric_limits<float>::quiet_NaN();
  }
  std::vector<char> out(static_cast<size_t>(n) * sdk::dtype_size(dtype));
  tensor::convert(values.data(), DSCORE_DTYPE_F32, out.data(), dtype, n);
  return out;
}

TEST(DeviceOps, CpuTargetIsTheEnginesHostCodeBitForBit) {
  const int64_t n = 3001;
  for (dscore_dtype d : kFloats) {
    SCOPED_TRACE(sdk::dtype_name(d));
    const std::vector<char> a = random_buffer(d, n, 1, false);
    const std::vector<char> b = random_buffer(d, n, 2, false);
    for (double factor : {0.25, 1.0 / 3.0, 1e-3, 7.0}) {
      std::vector<char> mine = a, theirs = a;
      scale_in_place(Target::cpu(), mine.data(), d, n, factor);
      tensor::scale_in_place(theirs.data(), d, n, factor);
      EXPECT_EQ(mine, theirs) << "scale_in_place by " << factor;
    }
    std::vector<char> mine = a, theirs = a;
    accumulate(Target::cpu(), mine.data(), b.data(), d, n);
    tensor::accumulate(theirs.data(), b.data(), d, n);
    EXPECT_EQ(mine, theirs) << "accumulate";
    for (dscore_dtype to : kFloats) {
      std::vector<char> out(static_cast<size_t>(n) * sdk::dtype_size(to), 0x55);
      std::vector<char> expected = out;
      convert(Target::cpu(), a.data(), d, out.data(), to, n);
      tensor::convert(a.data(), d, expected.data(), to, n);
      EXPECT_EQ(out, expected) << "convert to " << sdk::dtype_name(to);
    }
    std::vector<char> copied(a.size(), 0);
    copy(Target::cpu(), copied.data(), a.data(), d, n);
    EXPECT_EQ(copied, a);
    fill_zero(Target::cpu(), copied.data(), d, n);
    EXPECT_EQ(copied, std::vector<char>(a.size(), 0));
  }
}

TEST(DeviceOps, AccumulateIntoAddsAcrossDtypesInFp32RoundingOnce) {
  const int64_t n = 1001;
  for (dscore_dtype d : kFloats)
    for (dscore_dtype s : kFloats) {
      SCOPED_TRACE(std::string(sdk::dtype_name(s)) + " into " + sdk::dtype_name(d));
      const std::vector<char> a = random_buffer(d, n, 3, false);
      const std::vector<char> b = random_buffer(s, n, 4, false);
      std::vector<char> mine = a;
      accumulate_into(Target::cpu(), mine.data(), d, b.data(), s, n);
      std::vector<char> expected = a;
      if (d == s) {
        tensor::accumulate(expected.data(), b.data(), d, n);  // the same bytes as accumulate()
      } else {
        std::vector<float> x(n), y(n);
        tensor::convert(a.data(), d, x.data(), DSCORE_DTYPE_F32, n);
        tensor::convert(b.data(), s, y.data(), DSCORE_DTYPE_F32, n);
        for (int64_t i = 0; i < n; ++i) x[i] += y[i];
        tensor::convert(x.data(), DSCORE_DTYPE_F32, expected.data(), d, n);
      }
      // NaN + x keeps the NaN's bits on the CPU: a byte comparison holds.
      EXPECT_EQ(mine, expected);
    }
}

TEST(DeviceOps, CpuSumSquaresIsZerosSumSquaresInTheDeviceLayout) {
  for (dscore_dtype d : kFloats)
    for (bool finite : {true, false}) {
      // Past tensor::sum_squares' parallel chunk (2^18) too.
      const int64_t n = (int64_t{1} << 18) + 1001;
      const std::vector<char> a = random_buffer(d, n, 5, finite);
      const std::vector<char> b = random_buffer(d, n, 6, true);
      const std::vector<char>& data = finite ? b : a;
      SquareSumResult r{7, 7, 7, 7};
      sum_squares(Target::cpu(), data.data(), d, n, &r, nullptr);
      const tensor::SquareSum expected = tensor::sum_squares(data.data(), d, n);
      const tensor::SquareSum got = to_square_sum(r);
      EXPECT_EQ(std::memcmp(&got.hi, &expected.hi, sizeof(double)), 0) << sdk::dtype_name(d);
      EXPECT_EQ(std::memcmp(&got.lo, &expected.lo, sizeof(double)), 0) << sdk::dtype_name(d);
      EXPECT_EQ(got.non_finite, expected.non_finite);
      EXPECT_EQ(r.non_finite, finite ? 0 : 1);
      EXPECT_EQ(r.reserved, 0);
    }
}

TEST(DeviceOps, EmptyBuffersAreLeftAloneAndSumToZero) {
  float x = 3.0f;
  scale_in_place(Target::cpu(), &x, DSCORE_DTYPE_F32, 0, 2.0);
  accumulate(Target::cpu(), &x, &x, DSCORE_DTYPE_F32, 0);
  fill_zero(Target::cpu(), &x, DSCORE_DTYPE_F32, 0);
  EXPECT_EQ(x, 3.0f);
  SquareSumResult r{1, 1, 1, 0};
  sum_squares(Target::cpu(), nullptr, DSCORE_DTYPE_BF16, 0, &r, nullptr);
  EXPECT_EQ(r.hi, 0.0);
  EXPECT_EQ(r.lo, 0.0);
  EXPECT_EQ(r.non_finite, 0);
}

TEST(DeviceOps, BadCountsAndDtypesNameTheOp) {
  float x[4] = {};
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no std::invalid_argument)");
  };
  for (Target t : {Target::cpu(), Target::cuda(nullptr)}) {
    EXPECT_NE(message([&] {
                scale_in_place(t, x, DSCORE_DTYPE_I32, 4, 2.0);
              }).find("scale_in_place: dtype int32 is not fp32, bf16 or fp16"),
              std::string::npos);
    EXPECT_NE(message([&] {
                convert(t, x, DSCORE_DTYPE_F32, x, DSCORE_DTYPE_F64, 2);
              }).find("convert: dtype fp64 is not fp32, bf16 or fp16"),
              std::string::npos);
    EXPECT_NE(message([&] {
                accumulate(t, x, x, DSCORE_DTYPE_F32, -1);
              }).find("accumulate: negative element count -1"),
              std::string::npos);
    EXPECT_NE(message([&] {
                copy(t, x, x, DSCORE_DTYPE_INVALID, 1);
              }).find("copy: dtype invalid has no element size"),
              std::string::npos);
    SquareSumResult r;
    EXPECT_NE(message([&] {
                sum_squares(t, x, DSCORE_DTYPE_U8, 4, &r, nullptr);
              }).find("sum_squares: dtype uint8"),
              std::string::npos);
  }
  // fill_zero and copy take any dtype with a size (a memset, a memcpy).
  int32_t ints[3] = {1, 2, 3}, dst[3] = {};
  copy(Target::cpu(), dst, ints, DSCORE_DTYPE_I32, 3);
  EXPECT_EQ(dst[2], 3);
  fill_zero(Target::cpu(), ints, DSCORE_DTYPE_I32, 3);
  EXPECT_EQ(ints[0] | ints[1] | ints[2], 0);
}

TEST(DeviceOps, CudaTargetWithoutCudaSaysHowToGetIt) {
  EXPECT_STREQ(backend_name(Backend::kCpu), "cpu");
  EXPECT_STREQ(backend_name(Backend::kCuda), "cuda");
  EXPECT_EQ(sum_squares_workspace_bytes(Backend::kCpu), 0u);
  if (cuda_built()) {
    EXPECT_GE(sum_squares_workspace_bytes(Backend::kCuda), 1024 * sizeof(SquareSumResult));
    // Without a workspace the CUDA sum is refused before anything runs.
    SquareSumResult r;
    EXPECT_THROW(sum_squares(Target::cuda(nullptr), nullptr, DSCORE_DTYPE_F32, 1, &r, nullptr),
                 std::invalid_argument);
    GTEST_SKIP() << "a CUDA build: the CUDA backend is tested by device_ops_cuda_test (label gpu)";
  }
  EXPECT_EQ(sum_squares_workspace_bytes(Backend::kCuda), 0u);
  float x = 1;
  try {
    scale_in_place(Target::cuda(nullptr), &x, DSCORE_DTYPE_F32, 1, 2.0);
    ADD_FAILURE() << "a CUDA target ran in a build without CUDA";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("DSCORE_WITH_CUDA=ON"), std::string::npos) << e.what();
  }
  EXPECT_EQ(x, 1.0f);
}

}  // namespace
}  // namespace dscore::device::ops
