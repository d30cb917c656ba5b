// The AMX tile products (amx_gemm.h) against double-precision products of
// the same bf16 operands: every transpose pair, shapes on and off the
// tiles' 16 and 32 edges, padded leading dimensions, alpha, beta 0 (C
// never read) and 1; a packed B serving several A's; the choice of kernel
// by DSCORE_BF16_GEMM. Skipped, with the reason, where the CPU has no AMX.
#include "transformer_common/cpu/amx_gemm.h"

#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

namespace dscore::transformer::cpu {
namespace {

#define SKIP_WITHOUT_AMX()   \
  if (!amx_gemm_available()) \
  GTEST_SKIP() << "no AMX products here: " << amx_gemm_unavailable_reason()

std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = sdk::float_to_bf16(normal(rng));
  return v;
}

struct Operand {
  Op op;
  int64_t rows, cols, ld;  // op(X) is rows x cols
  std::vector<uint16_t> values;
  float at(int64_t r, int64_t c) const {
    return sdk::bf16_to_float(op == Op::kNone ? values[r * ld + c] : values[c * ld + r]);
  }
};

Operand random_operand(Op op, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t stored_rows = op == Op::kNone ? rows : cols;
  const int64_t ld = (op == Op::kNone ? cols : rows) + 3;  // wider than the rows
  return {op, rows, cols, ld, random_bf16(static_cast<size_t>(stored_rows * ld), rng)};
}

// C = alpha A B + beta C against doubles, within fp32 summation's error of
// sum |alpha a b| (bf16 products are exact in fp32); the padding of C
// untouched.
void expect_product(const Operand& a, const Operand& b, float alpha, float beta,
                    std::mt19937& rng) {
  const int64_t m = a.rows, n = b.cols, k = a.cols, ldc = n + 2;
  AmxA packed_a;
  AmxB packed_b;
  packed_a.pack(a.op, m, k, a.values.data(), a.ld);
  packed_b.pack(b.op, k, n, b.values.data(), b.ld);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> c(static_cast<size_t>(m * ldc));
  for (auto& x : c) x = normal(rng);
  if (beta == 0.0f)  // beta 0 overwrites: C's NaNs must not reach the result
    for (size_t i = 0; i < c.size(); i += 3) c[i] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> before = c;
  amx_gemm(packed_a, packed_b, alpha, beta, c.data(), ldc);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, scale = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = double(a.at(i, p)) * b.at(p, j);
        sum += x;
        scale += std::abs(x);
      }
      const double old = beta == 0.0f ? 0.0 : double(before[i * ldc + j]);
      const double want = alpha * sum + old;
      ASSERT_NEAR(c[i * ldc + j], want, 1e-5 * (std::abs(alpha) * scale + std::abs(old)) + 1e-30)
          << i << "," << j;
    }
    for (int64_t j = n; j < ldc; ++j) {
      const size_t e = static_cast<size_t>(i * ldc + j);
      ASSERT_TRUE(std::isnan(before[e]) ? std::isnan(c[e]) : c[e] == before[e]) << i << "," << j;
    }
  }
}

TEST(AmxGemm, MatchesDoublePrecisionOnEveryShapeAndLayout) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(21);
  const int64_t shapes[][3] = {{1, 1, 1},     {16, 16, 32},  {32, 32, 32},  {64, 256, 64},
                               {64, 64, 256}, {17, 33, 31},  {15, 47, 65},  {45, 31, 2},
                               {96, 80, 64},  {33, 17, 100}, {256, 64, 64}, {5, 300, 7}};
  for (Op op_a : {Op::kNone, Op::kTranspose})
    for (Op op_b : {Op::kNone, Op::kTranspose})
      for (const auto& s : shapes)
        for (float alpha : {1.0f, 0.125f})
          for (float beta : {0.0f, 1.0f}) {
            SCOPED_TRACE(::testing::Message()
                         << (op_a == Op::kNone ? "N" : "T") << (op_b == Op::kNone ? "N" : "T")
                         << " " << s[0] << "x" << s[1] << "x" << s[2] << " alpha " << alpha
                         << " beta " << beta);
            const Operand a = random_operand(op_a, s[0], s[2], rng);
            const Operand b = random_operand(op_b, s[2], s[1], rng);
            expect_product(a, b, alpha, beta, rng);
          }
}

// One packed B (a head's keys) serves every block of rows; packing a
// smaller A into storage that held a larger one leaves no stale values.
TEST(AmxGemm, PackedOperandsServeManyProducts) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(22);
  const Operand b = random_operand(Op::kTranspose, 64, 200, rng);
  AmxB packed_b;
  packed_b.pack(b.op, b.rows, b.cols, b.values.data(), b.ld);
  AmxA packed_a;
  for (int64_t rows : {64, 17, 64, 3}) {
    const Operand a = random_operand(Op::kNone, rows, 64, rng);
    packed_a.pack(a.op, rows, 64, a.values.data(), a.ld);
    std::vector<float> c(static_cast<size_t>(rows * 200));
    amx_gemm(packed_a, packed_b, 1.0f, 0.0f, c.data(), 200);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < 200; j += 7) {
        double sum = 0, scale = 0;
        for (int64_t p = 0; p < 64; ++p) {
          sum += double(a.at(i, p)) * b.at(p, j);
          scale += std::abs(double(a.at(i, p)) * b.at(p, j));
        }
        ASSERT_NEAR(c[i * 200 + j], sum, 1e-5 * scale) << rows << " rows: " << i << "," << j;
      }
  }
}

// A query block's products read the leading part of a head's packed keys:
// its first `keys` columns of K^T, its first `keys` rows of V.
TEST(AmxGemm, LeadingPartsOfBServeEachQueryBlock) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(24);
  const int64_t T = 200, hs = 64;
  const Operand k_t = random_operand(Op::kTranspose, hs, T, rng);  // K^T: hs x T
  const Operand v = random_operand(Op::kNone, T, hs, rng);         // V: T x hs
  AmxB packed_kt, packed_v;
  packed_kt.pack(k_t.op, hs, T, k_t.values.data(), k_t.ld);
  packed_v.pack(v.op, T, hs, v.values.data(), v.ld);
  AmxA packed;
  for (int64_t keys : {64, 100, 128, 193, 200}) {
    const Operand q = random_operand(Op::kNone, 48, hs, rng);
    packed.pack(q.op, 48, hs, q.values.data(), q.ld);
    std::vector<float> s(static_cast<size_t>(48 * keys));
    amx_gemm_part(packed, packed_kt, keys, 0.5f, 0.0f, s.data(), keys);
    const Operand p = random_operand(Op::kNone, 48, keys, rng);
    packed.pack(p.op, 48, keys, p.values.data(), p.ld);
    std::vector<float> o(static_cast<size_t>(48 * hs));
    amx_gemm_part(packed, packed_v, hs, 1.0f, 0.0f, o.data(), hs);
    for (int64_t i = 0; i < 48; ++i) {
      for (int64_t j = 0; j < keys; ++j) {
        double sum = 0, scale = 0;
        for (int64_t c = 0; c < hs; ++c) {
          sum += double(q.at(i, c)) * k_t.at(c, j);
          scale += std::abs(double(q.at(i, c)) * k_t.at(c, j));
        }
        ASSERT_NEAR(s[i * keys + j], 0.5 * sum, 1e-5 * scale) << keys << " keys: " << i << "," << j;
      }
      for (int64_t c = 0; c < hs; ++c) {
        double sum = 0, scale = 0;
        for (int64_t j = 0; j < keys; ++j) {
          sum += double(p.at(i, j)) * v.at(j, c);
          scale += std::abs(double(p.at(i, j)) * v.at(j, c));
        }
        ASSERT_NEAR(o[i * hs + c], sum, 1e-5 * scale) << keys << " keys: " << i << "," << c;
      }
    }
  }
  EXPECT_THROW(amx_gemm_part(packed, packed_kt, T + 1, 1.0f, 0.0f, nullptr, T + 1),
               std::logic_error);
}

// A row-major A that fills whole tiles is read where it lies (use), else
// copied: either way the bits of the copied product.
TEST(AmxGemm, ReadsAWhereItLiesWithTheBitsOfACopy) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(25);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{64, 96, 128},
                         {32, 40, 32},
                         {33, 64, 64},
                         {64, 64, 48}}) {
    const Operand a = random_operand(Op::kNone, m, k, rng);
    const Operand b = random_operand(Op::kTranspose, k, n, rng);
    AmxA copied, in_place;
    AmxB packed_b;
    copied.pack(Op::kNone, m, k, a.values.data(), a.ld);
    in_place.use(m, k, a.values.data(), a.ld);
    packed_b.pack(b.op, k, n, b.values.data(), b.ld);
    std::vector<float> want(static_cast<size_t>(m * n)), got(want.size());
    amx_gemm(copied, packed_b, 1.0f, 0.0f, want.data(), n);
    amx_gemm(in_place, packed_b, 1.0f, 0.0f, got.data(), n);
    EXPECT_EQ(got, want) << m << "x" << n << "x" << k;
  }
}

// A panel of B's columns from a 32-column boundary, into C's first columns.
TEST(AmxGemm, PanelsOfBsColumnsGiveThoseColumnsOfTheProduct) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(26);
  const int64_t m = 40, n = 150, k = 70;
  const Operand a = random_operand(Op::kNone, m, k, rng);
  const Operand b = random_operand(Op::kNone, k, n, rng);
  AmxA packed_a;
  AmxB packed_b;
  packed_a.pack(a.op, m, k, a.values.data(), a.ld);
  packed_b.pack(b.op, k, n, b.values.data(), b.ld);
  std::vector<float> whole(static_cast<size_t>(m * n));
  amx_gemm(packed_a, packed_b, 1.0f, 0.0f, whole.data(), n);
  for (auto [first, width] : {std::pair<int64_t, int64_t>{0, 64}, {64, 64}, {128, 22}, {32, 118}}) {
    std::vector<float> panel(static_cast<size_t>(m * width));
    amx_gemm_columns(packed_a, packed_b, first, width, 1.0f, 0.0f, panel.data(), width);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < width; ++j)
        ASSERT_EQ(panel[i * width + j], whole[i * n + first + j]) << first << ": " << i << "," << j;
  }
  std::vector<float> c(static_cast<size_t>(m * n));
  EXPECT_THROW(amx_gemm_columns(packed_a, packed_b, 16, 32, 1.0f, 0.0f, c.data(), n),
               std::logic_error);  // not on a 32-column block
  EXPECT_THROW(amx_gemm_columns(packed_a, packed_b, 128, 23, 1.0f, 0.0f, c.data(), n),
               std::logic_error);  // past B's columns
}

TEST(AmxGemm, RefusesMismatchedOperandsAndOtherBetas) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(23);
  const Operand a = random_operand(Op::kNone, 16, 32, rng);
  const Operand b = random_operand(Op::kNone, 48, 16, rng);
  AmxA packed_a;
  AmxB packed_b;
  packed_a.pack(a.op, 16, 32, a.values.data(), a.ld);
  packed_b.pack(b.op, 48, 16, b.values.data(), b.ld);
  std::vector<float> c(16 * 16);
  EXPECT_THROW(amx_gemm(packed_a, packed_b, 1.0f, 0.0f, c.data(), 16), std::logic_error);
  packed_b.pack(b.op, 32, 16, b.values.data(), b.ld);
  EXPECT_THROW(amx_gemm(packed_a, packed_b, 1.0f, 0.5f, c.data(), 16), std::logic_error);
  EXPECT_NO_THROW(amx_gemm(packed_a, packed_b, 1.0f, 1.0f, c.data(), 16));
}

TEST(AmxGemm, DscoreBf16GemmPicksTheKernelByName) {
  EXPECT_FALSE(amx_gemm_declined(nullptr));
  EXPECT_FALSE(amx_gemm_declined(""));
  EXPECT_FALSE(amx_gemm_declined("amx"));
  EXPECT_TRUE(amx_gemm_declined("onednn"));
  try {
    amx_gemm_declined("mkl");
    FAIL() << "an unknown kernel name was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("DSCORE_BF16_GEMM=mkl"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("amx"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("onednn"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dscore::transformer::cpu
