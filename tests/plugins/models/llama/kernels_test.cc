// The llama model's own CPU kernels (plugins/models/llama/cpu/kernels.cc):
// every backward against central finite differences of its forward in
// double (gradient_check.h: sum(out * R), tolerance 1e-6 relative), the
// forwards against formulas written out here, the fp32 SwiGLU (vectorised)
// against double, and the rotary frequencies with Llama 3's scaling
// against transformers' rule evaluated by hand at known points.
#include "cpu/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "llama_config.h"
#include "rope.h"
#include "tests/plugins/models/transformer_common/gradient_check.h"
#include "transformer_common/cpu/gemm.h"
#include "transformer_common/cpu/gemm_bf16.h"

namespace dscore::llama::cpu {
namespace {

using transformer::testing::dot;
using transformer::testing::expect_gradient;
using transformer::testing::random_vec;
using transformer::testing::Vec;

class LlamaKernels : public ::testing::Test {
 protected:
  void SetUp() override { transformer::cpu::load_gemm_library(); }
};

TEST_F(LlamaKernels, RmsNormForwardIsHuggingFacesFormula) {
  const int64_t N = 3, C = 5;
  const double eps = 1e-6;
  const Vec inp = random_vec(N * C, 1), w = random_vec(C, 2);
  Vec out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, eps);
  for (int64_t r = 0; r < N; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += inp[r * C + c] * inp[r * C + c] / C;
    for (int64_t c = 0; c < C; ++c)
      EXPECT_NEAR(out[r * C + c], inp[r * C + c] / std::sqrt(ms + eps) * w[c], 1e-14);
  }
}

TEST_F(LlamaKernels, RmsNormBackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t N = 20, C = 6;  // more rows than one block of 16
  Vec inp = random_vec(N * C, 3), w = random_vec(C, 4);
  const Vec r = random_vec(N * C, 5);
  auto f = [&] {
    Vec out(N * C), rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-5);
    return dot(out, r);
  };
  Vec out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-5);
  Vec dinp(N * C, 1.0), dw(C, 2.0);  // both accumulate
  rmsnorm_backward(dinp.data(), dw.data(), r.data(), inp.data(), w.data(), rstd.data(), N, C);
  for (double& x : dinp) x -= 1.0;
  for (double& x : dw) x -= 2.0;
  expect_gradient("dinp", &inp, dinp, f);
  expect_gradient("dweight", &w, dw, f);
}

TEST_F(LlamaKernels, RopeRotatesHalvesAndBackwardMatchesFiniteDifferences) {
  LlamaConfig c;
  c.head_dim = 6;
  c.rope_theta = 100.0;
  const int64_t B = 2, Tn = 3, heads = 2, hd = c.head_dim, ld = heads * hd + 1;  // padded rows
  const std::vector<double> inv_freq = rope_inv_freq(c);
  ASSERT_EQ(inv_freq.size(), 3u);
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_DOUBLE_EQ(inv_freq[static_cast<size_t>(i)], 1.0 / std::pow(100.0, 2.0 * i / 6.0));
  Vec cos(static_cast<size_t>(Tn * hd / 2)), sin(cos.size());
  rope_tables(cos.data(), sin.data(), inv_freq, Tn);
  Vec x = random_vec(B * Tn * ld, 6);
  // Forward: x_i' = x_i cos(t f_i) - x_{i+3} sin(t f_i); x_{i+3}' = x_{i+3} cos + x_i sin.
  Vec y = x;
  rope_forward(y.data(), cos.data(), sin.data(), B, Tn, heads, hd, ld);
  for (int64_t row = 0; row < B * Tn; ++row)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < 3; ++i) {
        const double a = static_cast<double>(row % Tn) * inv_freq[static_cast<size_t>(i)];
        const int64_t lo = row * ld + h * hd + i, hi = lo + 3;
        EXPECT_NEAR(y[lo], x[lo] * std::cos(a) - x[hi] * std::sin(a), 1e-14);
        EXPECT_NEAR(y[hi], x[hi] * std::cos(a) + x[lo] * std::sin(a), 1e-14);
      }
  for (int64_t row = 0; row < B * Tn; ++row) EXPECT_EQ(y[row * ld + ld - 1], x[row * ld + ld - 1]);
  const Vec r = random_vec(x.size(), 7);
  auto f = [&] {
    Vec z = x;
    rope_forward(z.data(), cos.data(), sin.data(), B, Tn, heads, hd, ld);
    return dot(z, r);
  };
  Vec dx = r;
  rope_backward(dx.data(), cos.data(), sin.data(), B, Tn, heads, hd, ld);
  expect_gradient("dx", &x, dx, f);
}

// transformers' _compute_llama3_parameters on Llama 3.1's settings
// (theta 500000, head_dim 128, factor 8, low 1, high 4, original 8192):
// wavelengths below 8192/4 = 2048 keep their frequency, those above
// 8192/1 are divided by 8, and the ones between are blended.
TEST_F(LlamaKernels, Llama3ScalingKeepsHighDividesLowAndBlendsTheMiddleFrequencies) {
  LlamaConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0;
  const std::vector<double> plain = rope_inv_freq(c);
  c.rope_scaling.llama3 = true;
  const std::vector<double> scaled = rope_inv_freq(c);
  int high = 0, low = 0, medium = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 2048.0) {
      EXPECT_EQ(scaled[i], plain[i]) << i;
      ++high;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8.0) << i;
      ++low;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      EXPECT_DOUBLE_EQ(scaled[i], (1 - smooth) * plain[i] / 8.0 + smooth * plain[i]) << i;
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / 8.0);
      ++medium;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
}

TEST_F(LlamaKernels, SwigluBackwardMatchesFiniteDifferencesWithDgateInDoutsBuffer) {
  const int64_t n = 23;
  Vec gate = random_vec(n, 8, 2.0), up = random_vec(n, 9);
  const Vec r = random_vec(n, 10);
  auto f = [&] {
    Vec out(n);
    swiglu_forward(out.data(), gate.data(), up.data(), n);
    return dot(out, r);
  };
  Vec out(n);
  swiglu_forward(out.data(), gate.data(), up.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(out[i], gate[i] / (1 + std::exp(-gate[i])) * up[i], 1e-14);
  Vec d = r, dup(n);
  swiglu_backward(d.data(), dup.data(), d.data(), gate.data(), up.data(), n);
  expect_gradient("dgate", &gate, d, f);
  expect_gradient("dup", &up, dup, f);
}

TEST_F(LlamaKernels, Fp32SwigluMatchesDouble) {
  const int64_t n = (1 << 14) + 37;  // more than one block, and a tail
  const Vec g = random_vec(n, 11, 3.0), u = random_vec(n, 12), d = random_vec(n, 13);
  std::vector<float> gf(g.begin(), g.end()), uf(u.begin(), u.end()), df(d.begin(), d.end());
  std::vector<float> out(n), dgate(n), dup(n);
  swiglu_forward(out.data(), gf.data(), uf.data(), n);
  swiglu_backward(dgate.data(), dup.data(), df.data(), gf.data(), uf.data(), n);
  Vec gd(gf.begin(), gf.end()), ud(uf.begin(), uf.end()), dd(df.begin(), df.end());
  Vec want(n), want_dgate(n), want_dup(n);
  swiglu_forward(want.data(), gd.data(), ud.data(), n);
  swiglu_backward(want_dgate.data(), want_dup.data(), dd.data(), gd.data(), ud.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(out[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << i;
    ASSERT_NEAR(dgate[i], want_dgate[i], 1e-5 * std::max(1.0, std::abs(want_dgate[i]))) << i;
    ASSERT_NEAR(dup[i], want_dup[i], 1e-5 * std::max(1.0, std::abs(want_dup[i]))) << i;
  }
}

// The bf16 layers' SwiGLU backward on rows as down_proj's product hands
// them over (chunks of 48 rows, 300 wide: rounding chunks and a tail):
// the bits of the fp32 kernel followed by round_to_bf16.
TEST_F(LlamaKernels, SwigluBackwardBf16RowsGiveTheFp32KernelRounded) {
  const int64_t N = 100, I = 300, n = N * I;
  const Vec g = random_vec(n, 21, 3.0), u = random_vec(n, 22), d = random_vec(n, 23);
  const std::vector<float> gf(g.begin(), g.end()), uf(u.begin(), u.end()), df(d.begin(), d.end());
  std::vector<float> dgate(n), dup(n);
  swiglu_backward(dgate.data(), dup.data(), df.data(), gf.data(), uf.data(), n);
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    transformer::cpu::round_to_bf16(out.data(), v.data(), static_cast<int64_t>(v.size()));
    return out;
  };
  std::vector<uint16_t> dgate16(n), dup16(n);
  for (int64_t r0 = 0; r0 < N; r0 += 48) {
    const int64_t r1 = std::min<int64_t>(N, r0 + 48);
    std::vector<float> rows(df.begin() + r0 * I, df.begin() + r1 * I);
    swiglu_backward_bf16_rows(dgate16.data(), dup16.data(), rows.data(), gf.data(), uf.data(), r0,
                              r1, I);
  }
  EXPECT_EQ(dgate16, to_bf16(dgate));
  EXPECT_EQ(dup16, to_bf16(dup));
}

TEST_F(LlamaKernels, EmbeddingBackwardMatchesFiniteDifferences) {
  const int64_t V = 5, C = 3;
  const std::vector<int32_t> tokens = {4, 1, 4, -1, 0, 2};  // a repeat and a padding
  const int64_t N = static_cast<int64_t>(tokens.size());
  Vec embed = random_vec(V * C, 14);
  const Vec r = random_vec(N * C, 15);
  auto f = [&] {
    Vec out(N * C);
    embedding_forward(out.data(), tokens.data(), embed.data(), N, C);
    return dot(out, r);
  };
  Vec dembed(V * C, 0.0);
  embedding_backward(dembed.data(), r.data(), tokens.data(), N, C);
  expect_gradient("dembed", &embed, dembed, f);
}

}  // namespace
}  // namespace dscore::llama::cpu
