// The bf16 GEMM (gemm_bf16.h) against a double-precision product of the
// same bf16 operands, for every transpose pair, odd shapes, padded leading
// dimensions, alpha and beta; its independence from the thread count
// (bitwise); the rounding against sdk::float_to_bf16; and the bf16 linear
// layers (linear_bf16.h) and LM head (linear.h) against fp32 ones on the
// rounded operands, and weight gradients lent unwritten. The products run on oneDNN's kernels and,
// where the CPU has AMX, on the tiles' (amx_gemm.h). Skipped, with the reason, where the build or
// the CPU has no bf16 GEMM (or DSCORE_CPU_ISA lowers the ISA), as on AVX2-only machines.
#include "transformer_common/cpu/gemm_bf16.h"

#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>
#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "tests/plugins/models/transformer_common/bf16_kernels.h"
#include "transformer_common/cpu/amx_gemm.h"
#include "transformer_common/cpu/linear.h"
#include "transformer_common/cpu/linear_bf16.h"

namespace dscore::transformer::cpu {
namespace {

#define SKIP_WITHOUT_BF16_GEMM() \
  if (!bf16_gemm_available())    \
  GTEST_SKIP() << "no bf16 GEMM here: " << bf16_gemm_unavailable_reason()

std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = sdk::float_to_bf16(normal(rng));
  return v;
}

// n standard normal floats.
std::vector<float> normal_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

struct Case {
  Op op_a, op_b;
  int64_t m, n, k;
  float alpha, beta;
};

// C = alpha op(A) op(B) + beta C in double; bound[i] = sum |alpha a b| + |beta c|,
// the scale of fp32 accumulation error.
void reference(const Case& t, const std::vector<uint16_t>& a, int64_t lda,
               const std::vector<uint16_t>& b, int64_t ldb, const std::vector<float>& c0,
               int64_t ldc, std::vector<double>* c, std::vector<double>* bound) {
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t j = 0; j < t.n; ++j) {
      double sum = 0, abs_sum = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        const double x = sdk::bf16_to_float(t.op_a == Op::kNone ? a[i * lda + p] : a[p * lda + i]);
        const double y = sdk::bf16_to_float(t.op_b == Op::kNone ? b[p * ldb + j] : b[j * ldb + p]);
        sum += x * y;
        abs_sum += std::abs(x * y);
      }
      const double old = t.beta == 0.0f ? 0.0 : t.beta * double(c0[i * ldc + j]);
      (*c)[i * ldc + j] = t.alpha * sum + old;
      (*bound)[i * ldc + j] = std::abs(t.alpha) * abs_sum + std::abs(old);
    }
}

// The products' tests run on oneDNN's kernels and, where the CPU has AMX,
// on the tiles' (amx_gemm.h).
class GemmBf16Products : public Bf16Kernels {};
class LinearBf16 : public Bf16Kernels {};
class LmHeadBf16 : public Bf16Kernels {};
INSTANTIATE_TEST_SUITE_P(Kernels, GemmBf16Products, ::testing::Values(true, false),
                         bf16_kernel_name);
INSTANTIATE_TEST_SUITE_P(Kernels, LinearBf16, ::testing::Values(true, false), bf16_kernel_name);
INSTANTIATE_TEST_SUITE_P(Kernels, LmHeadBf16, ::testing::Values(true, false), bf16_kernel_name);

TEST_P(GemmBf16Products, MatchesDoublePrecisionOnTheSameBf16Operands) {
  SKIP_WITHOUT_BF16_GEMM();
  std::mt19937 rng(11);
  std::vector<Case> cases;
  for (Op op_a : {Op::kNone, Op::kTranspose})
    for (Op op_b : {Op::kNone, Op::kTranspose})
      for (float beta : {0.0f, 1.0f}) {
        cases.push_back({op_a, op_b, 1, 1, 1, 1.0f, beta});
        cases.push_back({op_a, op_b, 7, 13, 5, 1.0f, beta});
        cases.push_back({op_a, op_b, 37, 53, 29, 0.5f, beta});
        cases.push_back({op_a, op_b, 517, 131, 77, 1.0f, beta});  // split by rows
        cases.push_back({op_a, op_b, 90, 301, 67, -2.0f, beta});  // split by columns
        // Inner sizes of several of the AMX route's inner blocks, and a tail.
        cases.push_back({op_a, op_b, 100, 70, 1100, 0.5f, beta});
        cases.push_back({op_a, op_b, 40, 150, 600, 1.0f, beta});
        // A B wider than one cached panel of the AMX route (2048 deep: 256 columns).
        cases.push_back({op_a, op_b, 310, 300, 2100, 1.0f, beta});
      }
  for (const Case& t : cases) {
    SCOPED_TRACE(::testing::Message()
                 << (t.op_a == Op::kNone ? "N" : "T") << (t.op_b == Op::kNone ? "N" : "T") << " "
                 << t.m << "x" << t.n << "x" << t.k << " alpha " << t.alpha << " beta " << t.beta);
    // Leading dimensions a few elements wider than the rows.
    const int64_t a_rows = t.op_a == Op::kNone ? t.m : t.k,
                  a_cols = t.op_a == Op::kNone ? t.k : t.m;
    const int64_t b_rows = t.op_b == Op::kNone ? t.k : t.n,
                  b_cols = t.op_b == Op::kNone ? t.n : t.k;
    const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = t.n + 2;
    const auto a = random_bf16(static_cast<size_t>(a_rows * lda), rng);
    const auto b = random_bf16(static_cast<size_t>(b_rows * ldb), rng);
    std::vector<float> c(static_cast<size_t>(t.m * ldc));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& x : c) x = normal(rng);
    if (t.beta == 0.0f)  // beta 0 overwrites, NaN included
      for (size_t i = 0; i < c.size(); i += 3) c[i] = std::numeric_limits<float>::quiet_NaN();
    std::vector<double> want(c.size()), bound(c.size());
    reference(t, a, lda, b, ldb, c, ldc, &want, &bound);
    const std::vector<float> before = c;
    gemm_bf16(t.op_a, t.op_b, t.m, t.n, t.k, t.alpha, a.data(), lda, b.data(), ldb, t.beta,
              c.data(), ldc);
    for (int64_t i = 0; i < t.m; ++i) {
      for (int64_t j = 0; j < t.n; ++j) {
        const size_t e = static_cast<size_t>(i * ldc + j);
        // bf16 products are exact in fp32; only the fp32 sums round.
        ASSERT_NEAR(c[e], want[e], 1e-5 * bound[e] + 1e-30) << i << "," << j;
      }
      for (int64_t j = t.n; j < ldc; ++j) {  // the padding is not written
        const size_t e = static_cast<size_t>(i * ldc + j);
        ASSERT_TRUE(std::isnan(before[e]) ? std::isnan(c[e]) : c[e] == before[e]);
      }
    }
  }
}

TEST_P(GemmBf16Products, AddsTheBiasToEveryRowInsideTheCall) {
  SKIP_WITHOUT_BF16_GEMM();
  std::mt19937 rng(13);
  // Row blocks (m >= n), column blocks (m < n), one call, k = 0; beta 0 and 1.
  for (auto [m, n, k] :
       {std::tuple<int64_t, int64_t, int64_t>{2100, 96, 64}, {64, 3000, 48}, {5, 7, 3}, {4, 6, 0}})
    for (float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k << " beta " << beta);
      const Case t{Op::kNone, Op::kTranspose, m, n, k, 1.0f, beta};
      const int64_t lda = k + 1, ldb = k + 3, ldc = n + 2;
      const auto a = random_bf16(static_cast<size_t>(m * lda), rng);
      const auto b = random_bf16(static_cast<size_t>(n * ldb), rng);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> bias(static_cast<size_t>(n)), c(static_cast<size_t>(m * ldc));
      for (auto& x : bias) x = normal(rng);
      for (auto& x : c) x = normal(rng);
      std::vector<double> want(c.size()), bound(c.size());
      reference(t, a, lda, b, ldb, c, ldc, &want, &bound);
      gemm_bf16(t.op_a, t.op_b, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc,
                bias.data());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const size_t e = static_cast<size_t>(i * ldc + j);
          const double with_bias = want[e] + bias[static_cast<size_t>(j)];
          ASSERT_NEAR(c[e], with_bias, 1e-5 * (bound[e] + std::abs(bias[j])) + 1e-30)
              << i << "," << j;
        }
    }
  const uint16_t one = 0x3f80;
  float c = 0, bias = 1;
  EXPECT_THROW(gemm_bf16(Op::kNone, Op::kNone, 1, 1, 1, 2.0f, &one, 1, &one, 1, 0.0f, &c, 1, &bias),
               std::logic_error);
}

TEST_P(GemmBf16Products, ResultsDoNotDependOnTheThreadCount) {
  SKIP_WITHOUT_BF16_GEMM();
  std::mt19937 rng(3);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{700, 300, 200}, {96, 900, 256}}) {
    const auto a = random_bf16(static_cast<size_t>(m * k), rng);
    const auto b = random_bf16(static_cast<size_t>(k * n), rng);
    std::vector<float> c1(static_cast<size_t>(m * n), 0.25f), c4 = c1;
    {
      tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
      gemm_bf16(Op::kNone, Op::kNone, m, n, k, 1.0f, a.data(), k, b.data(), n, 1.0f, c1.data(), n);
    }
    {  // more threads than this machine may have cores: blocks run in any order
      tbb::global_control four(tbb::global_control::max_allowed_parallelism, 4);
      gemm_bf16(Op::kNone, Op::kNone, m, n, k, 1.0f, a.data(), k, b.data(), n, 1.0f, c4.data(), n);
    }
    EXPECT_EQ(c1, c4) << m << "x" << n << "x" << k;
  }
}

// The product handed over in chunks: every row once, in chunks of
// kConsumedRows (the last shorter), within the fp32 accumulation error of
// the double-precision product plus the bias, the same at 1 and 4 threads;
// both layouts of B; and k = 0 gives the bias alone.
TEST_P(GemmBf16Products, ConsumedChunksHoldTheProductPlusBiasOnce) {
  SKIP_WITHOUT_BF16_GEMM();
  std::mt19937 rng(17);
  for (Op op_b : {Op::kNone, Op::kTranspose})
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{3 * kConsumedRows + 8, 96, 80},
                           {kConsumedRows - 5, 200, 33},
                           {70, 24, 0}}) {
      SCOPED_TRACE(::testing::Message()
                   << m << "x" << n << "x" << k << " op_b " << (op_b == Op::kNone ? "N" : "T"));
      const int64_t lda = k + 2, ldb = (op_b == Op::kNone ? n : k) + 3;
      const Case t{Op::kNone, op_b, m, n, k, 1.0f, 0.0f};
      const auto a = random_bf16(static_cast<size_t>(m * lda), rng);
      const auto b = random_bf16(static_cast<size_t>((op_b == Op::kNone ? k : n) * ldb), rng);
      const std::vector<float> bias = normal_floats(n, rng);
      std::vector<double> want(static_cast<size_t>(m * n)), bound(want.size());
      reference(t, a, lda, b, ldb, std::vector<float>(want.size()), n, &want, &bound);
      auto run = [&](int threads) {
        tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
        std::vector<float> c(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
        std::vector<int> seen(static_cast<size_t>(m), 0);
        gemm_bf16_consumed(op_b, m, n, k, a.data(), lda, b.data(), ldb, bias.data(),
                           [&](int64_t r0, int64_t r1, float* rows) {
                             EXPECT_EQ(r0 % kConsumedRows, 0);
                             EXPECT_EQ(r1, std::min(m, r0 + kConsumedRows));
                             std::copy(rows, rows + (r1 - r0) * n, c.begin() + r0 * n);
                             for (int64_t r = r0; r < r1; ++r) ++seen[static_cast<size_t>(r)];
                           });
        EXPECT_EQ(seen, std::vector<int>(static_cast<size_t>(m), 1));
        return c;
      };
      const std::vector<float> c = run(1);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const size_t e = static_cast<size_t>(i * n + j);
          ASSERT_NEAR(c[e], want[e] + bias[static_cast<size_t>(j)],
                      1e-5 * (bound[e] + std::abs(bias[static_cast<size_t>(j)])) + 1e-30)
              << i << "," << j;
        }
      EXPECT_EQ(run(4), c);
    }
}

// B packed once and read by the products of several A: each within the
// fp32 accumulation error of the double-precision product, for both
// layouts of B, row counts of one call and of several blocks, and a C
// pitch wider than n; the same at 1 and 4 threads.
TEST_P(GemmBf16Products, PackedBServesSeveralProducts) {
  SKIP_WITHOUT_BF16_GEMM();
  std::mt19937 rng(19);
  for (Op op_b : {Op::kNone, Op::kTranspose}) {
    const int64_t n = 150, k = 70, ldb = (op_b == Op::kNone ? n : k) + 5, ldc = n + 3;
    const auto b = random_bf16(static_cast<size_t>((op_b == Op::kNone ? k : n) * ldb), rng);
    AlignedVector<uint8_t> storage;
    const Bf16PackedB packed(op_b, n, k, b.data(), ldb, storage);
    if (amx_gemm_available()) {  // the tiles' copy, kept on this thread
      EXPECT_NE(packed.tiles(), nullptr);
    } else {  // oneDNN's, in the caller's storage
      EXPECT_EQ(packed.tiles(), nullptr);
      EXPECT_GE(storage.size(), bf16_packed_bytes(op_b, n, k));
    }
    for (int64_t m : {int64_t{5}, int64_t{700}}) {
      SCOPED_TRACE(::testing::Message()
                   << "m " << m << " op_b " << (op_b == Op::kNone ? "N" : "T"));
      const int64_t lda = k + 1;
      const Case t{Op::kNone, op_b, m, n, k, 1.0f, 0.0f};
      const auto a = random_bf16(static_cast<size_t>(m * lda), rng);
      std::vector<double> want(static_cast<size_t>(m * ldc)), bound(want.size());
      reference(t, a, lda, b, ldb, std::vector<float>(want.size()), ldc, &want, &bound);
      auto run = [&](int threads) {
        tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
        std::vector<float> c(want.size(), -7.0f);
        gemm_bf16_packed(m, a.data(), lda, packed, c.data(), ldc);
        return c;
      };
      const std::vector<float> c = run(1);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const size_t e = static_cast<size_t>(i * ldc + j);
          ASSERT_NEAR(c[e], want[e], 1e-5 * bound[e] + 1e-30) << i << "," << j;
        }
        for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(c[static_cast<size_t>(i * ldc + j)], -7.0f);
      }
      EXPECT_EQ(run(4), c);
    }
  }
}

TEST(GemmBf16, RoundsAsTheSdkDoes) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> in(100003);  // blocks of 16384 and a tail of 3 past 16 lanes
  for (auto& x : in) {
    const uint32_t u = bits(rng);
    std::memcpy(&x, &u, sizeof x);  // every pattern: NaNs, infinities, subnormals
  }
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            1.00390625f,
                            1.01171875f,
                            3.4028235e38f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min()};
  for (size_t i = 0; i < std::size(specials); ++i) in[i] = specials[i];
  std::vector<uint16_t> out(in.size());
  round_to_bf16(out.data(), in.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], sdk::float_to_bf16(in[i])) << in[i];
}

// A gradient added into a bf16 accumulator: one fp32 sum per element,
// rounded once as the sdk rounds (over several TBB blocks and a tail).
TEST(GemmBf16, AddToBf16AddsAndRoundsAsTheSdkDoes) {
  std::mt19937 rng(6);
  const auto before = normal_floats(70001, rng), add = normal_floats(70001, rng);
  std::vector<uint16_t> acc(before.size());
  for (size_t i = 0; i < acc.size(); ++i) acc[i] = sdk::float_to_bf16(before[i]);
  std::vector<uint16_t> expect(acc.size());
  for (size_t i = 0; i < acc.size(); ++i)
    expect[i] = sdk::float_to_bf16(sdk::bf16_to_float(acc[i]) + add[i]);
  add_to_bf16(acc.data(), add.data(), static_cast<int64_t>(acc.size()));
  for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(acc[i], expect[i]) << i;
}

// The bf16 linear layers give the fp32 ones' results on operands rounded
// to bf16 (up to fp32 summation order); the bias gradient is the fp32 one.
TEST_P(LinearBf16, MatchesFp32LinearOnRoundedOperands) {
  SKIP_WITHOUT_BF16_GEMM();
  const int64_t N = 300, C = 96, OC = 160;
  std::mt19937 rng(9);
  auto randoms = [&](int64_t n) { return normal_floats(n, rng); };
  auto rounded = [](std::vector<float> v) {
    for (auto& x : v) x = sdk::bf16_to_float(sdk::float_to_bf16(x));
    return v;
  };
  const auto inp = randoms(N * C), dout = randoms(N * OC), bias = randoms(OC);
  const auto w32 = rounded(randoms(OC * C));
  std::vector<uint16_t> w16(w32.size());
  for (size_t i = 0; i < w32.size(); ++i) w16[i] = sdk::float_to_bf16(w32[i]);

  std::vector<float> out16(static_cast<size_t>(N * OC)), out32 = out16;
  matmul_forward_bf16(out16.data(), inp.data(), w16.data(), bias.data(), N, C, OC);
  matmul_forward(out32.data(), rounded(inp).data(), w32.data(), bias.data(), N, C, OC);
  for (size_t i = 0; i < out16.size(); ++i) ASSERT_NEAR(out16[i], out32[i], 1e-4) << i;

  // dinp accumulated onto a start value, dweight and dbias accumulated.
  std::vector<float> dinp16 = randoms(N * C), dinp32 = dinp16;
  std::vector<float> dw16 = randoms(OC * C), dw32 = dw16;
  const std::vector<float> db_start = randoms(OC);
  std::vector<float> db16 = db_start, db32 = db_start;
  matmul_backward_bf16(dinp16.data(), dw16.data(), db16.data(), dout.data(), inp.data(), w16.data(),
                       N, C, OC, /*accumulate_dinp=*/true);
  matmul_backward(dinp32.data(), dw32.data(), static_cast<float*>(nullptr), rounded(dout).data(),
                  rounded(inp).data(), w32.data(), N, C, OC, /*accumulate_dinp=*/true);
  for (size_t i = 0; i < dinp16.size(); ++i) ASSERT_NEAR(dinp16[i], dinp32[i], 1e-4) << i;
  for (size_t i = 0; i < dw16.size(); ++i) ASSERT_NEAR(dw16[i], dw32[i], 2e-4) << i;
  // The bias gradient sums the fp32 output gradient, not its rounding: the
  // fp32 layer's bits.
  std::vector<float> scratch_dinp(dinp16.size()), scratch_dw(dw16.size());
  matmul_backward(scratch_dinp.data(), scratch_dw.data(), db32.data(), dout.data(), inp.data(),
                  w32.data(), N, C, OC);
  EXPECT_EQ(db16, db32);
}

// Operands a producer rounded already (Bf16Operand::rounded) give the bits
// of the same values passed as fp32 and rounded inside the call.
TEST_P(LinearBf16, RoundedOperandsGiveTheBitsOfFp32Ones) {
  SKIP_WITHOUT_BF16_GEMM();
  const int64_t N = 300, C = 96, OC = 160;
  std::mt19937 rng(10);
  auto randoms = [&](int64_t n) { return normal_floats(n, rng); };
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    round_to_bf16(out.data(), v.data(), static_cast<int64_t>(v.size()));
    return out;
  };
  const auto inp = randoms(N * C), dout = randoms(N * OC), bias = randoms(OC);
  const auto inp16 = to_bf16(inp), dout16 = to_bf16(dout), w16 = to_bf16(randoms(OC * C));

  std::vector<float> out_values(static_cast<size_t>(N * OC)), out_rounded = out_values;
  matmul_forward_bf16(out_values.data(), Bf16Operand{inp.data(), nullptr}, w16.data(), bias.data(),
                      N, C, OC);
  matmul_forward_bf16(out_rounded.data(), Bf16Operand{nullptr, inp16.data()}, w16.data(),
                      bias.data(), N, C, OC);
  EXPECT_EQ(out_rounded, out_values);

  const std::vector<float> dw_start = randoms(OC * C);
  std::vector<float> dinp_values(static_cast<size_t>(N * C)), dinp_rounded = dinp_values;
  std::vector<float> dw_values = dw_start, dw_rounded = dw_start;
  matmul_backward_bf16(dinp_values.data(), dw_values.data(), nullptr,
                       Bf16Operand{dout.data(), nullptr}, Bf16Operand{inp.data(), nullptr},
                       w16.data(), N, C, OC);
  matmul_backward_bf16(dinp_rounded.data(), dw_rounded.data(), nullptr,
                       Bf16Operand{nullptr, dout16.data()}, Bf16Operand{nullptr, inp16.data()},
                       w16.data(), N, C, OC);
  EXPECT_EQ(dinp_rounded, dinp_values);
  EXPECT_EQ(dw_rounded, dw_values);

  // A bias gradient needs dout's fp32 values.
  std::vector<float> db(static_cast<size_t>(OC));
  EXPECT_THROW(matmul_backward_bf16(dinp_rounded.data(), dw_rounded.data(), db.data(),
                                    Bf16Operand{nullptr, dout16.data()},
                                    Bf16Operand{inp.data(), nullptr}, w16.data(), N, C, OC),
               std::logic_error);
}

// A weight gradient lent unwritten (lend_unwritten_gradient) holds, after
// the backward, the bits a zeroed one does: the product overwrites what
// the buffer held (NaNs here). A product into part of a lent buffer zeroes
// the rest; a buffer never written reports it at the end.
TEST_P(LinearBf16, UnwrittenWeightGradientsAreOverwritten) {
  SKIP_WITHOUT_BF16_GEMM();
  const int64_t N = 200, C = 64, OC = 96;
  std::mt19937 rng(12);
  const auto inp = normal_floats(N * C, rng), dout = normal_floats(N * OC, rng);
  std::vector<uint16_t> w16(static_cast<size_t>(OC * C));
  round_to_bf16(w16.data(), normal_floats(OC * C, rng).data(), OC * C);
  std::vector<float> dinp(static_cast<size_t>(N * C));
  auto backward = [&](float* dw) {
    matmul_backward_bf16(dinp.data(), dw, nullptr, Bf16Operand{dout.data(), nullptr},
                         Bf16Operand{inp.data(), nullptr}, w16.data(), N, C, OC);
  };
  std::vector<float> zeroed(static_cast<size_t>(OC * C), 0.0f);
  backward(zeroed.data());

  std::vector<float> lent(static_cast<size_t>(OC * C), std::numeric_limits<float>::quiet_NaN());
  lend_unwritten_gradient(lent.data(), OC * C);
  backward(lent.data());
  EXPECT_FALSE(end_unwritten_gradient(lent.data()));  // written
  EXPECT_EQ(lent, zeroed);

  // The product covers the second half of a lent buffer only: the first
  // half is zeroed, the second holds the product.
  std::vector<float> wide(static_cast<size_t>(2 * OC * C), std::numeric_limits<float>::quiet_NaN());
  lend_unwritten_gradient(wide.data(), 2 * OC * C);
  backward(wide.data() + OC * C);
  EXPECT_FALSE(end_unwritten_gradient(wide.data()));
  EXPECT_TRUE(std::all_of(wide.begin(), wide.begin() + OC * C, [](float v) { return v == 0.0f; }));
  EXPECT_TRUE(std::equal(zeroed.begin(), zeroed.end(), wide.begin() + OC * C));

  // Never written: said once, then forgotten; a later backward adds to what
  // the buffer holds, as usual.
  std::vector<float> unused(static_cast<size_t>(OC * C), 1.0f);
  lend_unwritten_gradient(unused.data(), OC * C);
  EXPECT_TRUE(end_unwritten_gradient(unused.data()));
  EXPECT_FALSE(end_unwritten_gradient(unused.data()));
  backward(unused.data());
  for (size_t i = 0; i < unused.size(); ++i)  // the 1 joins the sum first: fp32 rounding apart
    ASSERT_NEAR(unused[i], zeroed[i] + 1.0f, 1e-5f * (1.0f + std::abs(zeroed[i]))) << i;
}

// The LM head on bf16 weights (lm_head_forward_backward with w16) against
// the fp32 head on the same bf16 values: the logits are exact products
// summed in fp32 either way, so the loss agrees to fp32 summation order;
// dx and dw differ by the rounding of the logits' gradient to bf16 (a
// relative 2^-9 per element). Two row blocks (V 20000: 838 rows, then 62),
// and rows without a target.
TEST_P(LmHeadBf16, MatchesTheFp32HeadOnTheSameValues) {
  SKIP_WITHOUT_BF16_GEMM();
  const int64_t N = 900, C = 48, V = 20000;
  ASSERT_LT(lm_rows_per_block(N, V), N);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto bf16_values = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = sdk::bf16_to_float(sdk::float_to_bf16(normal(rng)));
    return v;
  };
  const auto x = bf16_values(N * C), w32 = bf16_values(V * C);
  std::vector<uint16_t> w16(w32.size());
  for (size_t i = 0; i < w32.size(); ++i) w16[i] = sdk::float_to_bf16(w32[i]);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) targets[i] = i % 7 == 3 ? -1 : static_cast<int32_t>(rng() % V);
  const double scale = 1.0 / 257;
  std::vector<float> dx16(static_cast<size_t>(N * C)), dx32 = dx16;
  const std::vector<float> dw_start = bf16_values(V * C);  // dw is accumulated onto
  std::vector<float> dw16 = dw_start, dw32 = dw_start;
  const double loss16 = lm_head_forward_backward(dx16.data(), dw16.data(), x.data(), w32.data(),
                                                 targets.data(), N, C, V, scale, w16.data());
  const double loss32 = lm_head_forward_backward(dx32.data(), dw32.data(), x.data(), w32.data(),
                                                 targets.data(), N, C, V, scale);
  EXPECT_NEAR(loss16, loss32, 1e-5 * loss32);
  auto largest = [](const std::vector<float>& v) {
    float m = 0;
    for (float e : v) m = std::max(m, std::abs(e));
    return m;
  };
  // Within 2^-8 of the largest element of dx and of the head's part of dw
  // (seen: 1.3e-3 of it for each).
  const double dx_tol = std::ldexp(largest(dx32), -8);
  for (size_t i = 0; i < dx16.size(); ++i) ASSERT_NEAR(dx16[i], dx32[i], dx_tol) << "dx " << i;
  std::vector<float> head_part(dw32.size());
  for (size_t i = 0; i < dw32.size(); ++i) head_part[i] = dw32[i] - dw_start[i];
  const double dw_tol = std::ldexp(largest(head_part), -8);
  for (size_t i = 0; i < dw16.size(); ++i) ASSERT_NEAR(dw16[i], dw32[i], dw_tol) << "dw " << i;
  // Rows without a target give no gradient.
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(dx16[static_cast<size_t>(3 * C + c)], 0.0f);
}

TEST(GemmBf16, SaysWhyItIsUnavailable) {
  if (bf16_gemm_available()) {
    EXPECT_STREQ(bf16_gemm_unavailable_reason(), "");
    return;
  }
  EXPECT_STRNE(bf16_gemm_unavailable_reason(), "");
  const uint16_t one = sdk::float_to_bf16(1.0f);
  float c = 0;
  EXPECT_THROW(gemm_bf16(Op::kNone, Op::kNone, 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1),
               std::logic_error);
}

}  // namespace
}  // namespace dscore::transformer::cpu
