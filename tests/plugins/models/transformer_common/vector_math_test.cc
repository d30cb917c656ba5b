// The vectorised fp32 GELU and SiLU products and the softmax row against
// double-precision references, on every ISA this CPU has, with tails of every length; and position
// independence: an element's result does not depend on where it lies in the array.
#include "transformer_common/cpu/vector_math.h"

#include "transformer_common/cpu/aligned.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace dscore::transformer::cpu {
namespace {

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  const double s = 0.7978845608028654;
  const double th = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

std::vector<VectorIsa> isas_here() {
  std::vector<VectorIsa> isas = {VectorIsa::kScalar};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    isas.push_back(VectorIsa::kAvx2);
  if (__builtin_cpu_supports("avx512f")) isas.push_back(VectorIsa::kAvx512);
  return isas;
}

TEST(VectorMath, GeluMatchesDoublePrecisionOnEveryIsaAndTailLength) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (VectorIsa isa : isas_here()) {
    SCOPED_TRACE(vector_isa_name(isa));
    for (int64_t n = 1; n <= 40; ++n) {
      std::vector<float> x(static_cast<size_t>(n)), d(x.size()), out(x.size()), dx(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = normal(rng);
        d[i] = normal(rng);
      }
      gelu_forward_f32(out.data(), x.data(), n, isa);
      gelu_backward_f32(dx.data(), x.data(), d.data(), n, isa);
      for (size_t i = 0; i < x.size(); ++i) {
        const double want = gelu_ref(x[i]), want_grad = gelu_grad_ref(x[i]) * d[i];
        EXPECT_NEAR(out[i], want, 2e-6 * std::abs(want) + 2e-7) << "x = " << x[i];
        EXPECT_NEAR(dx[i], want_grad, 2e-6 * std::abs(want_grad) + 2e-6 * std::abs(d[i]))
            << "x = " << x[i];
      }
    }
  }
  std::printf("vector ISA chosen on this CPU: %s\n", vector_isa_name(vector_isa()));
}

TEST(VectorMath, AddRowsGivesTheScalarLoopsBitsOnEveryIsa) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 9, stride = 45;
  std::vector<float> m(static_cast<size_t>(rows * stride));
  for (float& v : m) v = normal(rng);
  for (int64_t n : {int64_t{1}, int64_t{8}, int64_t{13}, int64_t{40}}) {
    std::vector<float> want(static_cast<size_t>(n), 0.5f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) want[i] += m[r * stride + i];
    for (VectorIsa isa : isas_here()) {
      SCOPED_TRACE(vector_isa_name(isa));
      std::vector<float> got(static_cast<size_t>(n), 0.5f);
      add_rows_f32(got.data(), m.data(), rows, stride, n, isa);
      EXPECT_EQ(got, want) << "n = " << n;
    }
  }
}

TEST(VectorMath, AnElementsResultDoesNotDependOnItsPosition) {
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -4.0f + 0.23f * static_cast<float>(i);
  for (VectorIsa isa : isas_here()) {
    SCOPED_TRACE(vector_isa_name(isa));
    std::vector<float> whole(x.size()), dwhole(x.size()), ones(x.size(), 1.0f);
    gelu_forward_f32(whole.data(), x.data(), static_cast<int64_t>(x.size()), isa);
    gelu_backward_f32(dwhole.data(), x.data(), ones.data(), static_cast<int64_t>(x.size()), isa);
    for (size_t i = 0; i < x.size(); ++i) {  // each element alone: a tail of one
      float one = 0, done = 0;
      gelu_forward_f32(&one, &x[i], 1, isa);
      gelu_backward_f32(&done, &x[i], &ones[i], 1, isa);
      EXPECT_EQ(one, whole[i]) << i;
      EXPECT_EQ(done, dwhole[i]) << i;
    }
  }
}

double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
double silu_grad_ref(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

// SwiGLU's pieces (libmvec's expf): within a few ulp of double, for every
// ISA and tail length, including inputs where exp(-x) overflows.
TEST(VectorMath, SiluMulMatchesDoublePrecisionOnEveryIsaAndTailLength) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (VectorIsa isa : isas_here()) {
    SCOPED_TRACE(vector_isa_name(isa));
    for (int64_t n = 1; n <= 40; ++n) {
      std::vector<float> x(static_cast<size_t>(n)), m(x.size()), out(x.size()), grad(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = i == 3 ? -120.0f : normal(rng);  // exp(120) is inf in fp32
        m[i] = normal(rng);
      }
      silu_mul_f32(out.data(), x.data(), m.data(), n, isa);
      silu_grad_mul_f32(grad.data(), x.data(), m.data(), n, isa);
      for (size_t i = 0; i < x.size(); ++i) {
        const double want = silu_ref(x[i]) * m[i], want_grad = silu_grad_ref(x[i]) * m[i];
        EXPECT_NEAR(out[i], want, 2e-6 * std::abs(want) + 1e-7 * std::abs(m[i])) << "x " << x[i];
        EXPECT_NEAR(grad[i], want_grad, 2e-6 * std::abs(want_grad) + 1e-6 * std::abs(m[i]))
            << "x = " << x[i];
      }
    }
  }
}

// The streaming copy copies every value exactly, onto cache-line aligned
// destinations (streamed on AVX-512) and others (memcpy), with tails.
TEST(VectorMath, StreamingCopyCopiesEveryValue) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (VectorIsa isa : isas_here()) {
    SCOPED_TRACE(vector_isa_name(isa));
    for (int64_t n : {1, 15, 16, 17, 100, 1000}) {
      std::vector<float> src(static_cast<size_t>(n));
      for (auto& x : src) x = normal(rng);
      for (size_t offset : {0, 1}) {  // floats past a 64-byte boundary
        AlignedVector<float> dst(static_cast<size_t>(n) + 1, -1.0f);
        copy_streaming_f32(dst.data() + offset, src.data(), n, isa);
        EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + static_cast<long>(offset)))
            << n << " from " << offset;
        EXPECT_EQ(dst[offset == 0 ? static_cast<size_t>(n) : 0], -1.0f);
      }
    }
  }
}

// The bf16 LM head's softmax on lanes against double precision: every
// ISA, every tail length up to 40 and a 32000-token row, large logits (no
// overflow: the row's maximum is taken first) and a -inf logit (probability
// 0); the log-sum-exp returned.
TEST(VectorMath, SoftmaxRowMatchesDoublePrecisionOnEveryIsa) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 40; ++n) lengths.push_back(n);
  lengths.push_back(32000);
  for (VectorIsa isa : isas_here()) {
    SCOPED_TRACE(vector_isa_name(isa));
    for (int64_t n : lengths) {
      std::vector<float> z(static_cast<size_t>(n));
      for (auto& x : z) x = normal(rng) + 500.0f;
      if (n > 3) z[2] = -INFINITY;
      double mx = -INFINITY;
      for (float x : z) mx = std::max(mx, double(x));
      double sum = 0;
      for (float x : z) sum += std::exp(double(x) - mx);
      std::vector<float> got = z;
      const double lse = softmax_row_f32(got.data(), n, isa);
      EXPECT_NEAR(lse, mx + std::log(sum), 1e-5 * std::abs(mx)) << n;
      // The sum in fp32 lanes: its rounding grows with the row's length.
      const double relative = 1e-6 * (2.0 + double(n) / 100.0);
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(double(z[static_cast<size_t>(i)]) - mx) / sum;
        ASSERT_NEAR(got[static_cast<size_t>(i)], want, relative * want + 1e-30) << n << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace dscore::transformer::cpu
