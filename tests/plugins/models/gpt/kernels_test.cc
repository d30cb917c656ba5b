// Every CPU kernel's backward (attention's: attention_test.cc) against
// central finite differences of its forward, in double precision on tiny
// shapes (the check and its tolerance: tests/plugins/models/transformer_common/gradient_check.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "cpu/kernels.h"
#include "tests/plugins/models/transformer_common/gradient_check.h"
#include "transformer_common/cpu/gemm.h"
#include "transformer_common/cpu/gemm_bf16.h"

namespace dscore::gpt::cpu {
namespace {

using transformer::testing::dot;
using transformer::testing::expect_gradient;
using transformer::testing::random_vec;
using transformer::testing::Vec;

class CpuKernels : public ::testing::Test {
 protected:
  void SetUp() override { transformer::cpu::load_gemm_library(); }
};

TEST_F(CpuKernels, LayerNormBackwardMatchesFiniteDifferences) {
  const int64_t N = 3, C = 5;
  Vec inp = random_vec(N * C, 1), w = random_vec(C, 2), b = random_vec(C, 3),
      r = random_vec(N * C, 4);
  auto f = [&] {
    Vec out(N * C), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return dot(out, r);
  };
  Vec out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  Vec dinp(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  expect_gradient("dinp", &inp, dinp, f);
  expect_gradient("dweight", &w, dw, f);
  expect_gradient("dbias", &b, db, f);
}

TEST_F(CpuKernels, LayerNormBackwardAccumulatesIntoItsOutputs) {
  const int64_t N = 2, C = 4;
  Vec inp = random_vec(N * C, 5), w = random_vec(C, 6), b = random_vec(C, 7),
      r = random_vec(N * C, 8);
  Vec out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  Vec d0(N * C, 0.0), dw0(C, 0.0), db0(C, 0.0), d1(N * C, 1.0), dw1(C, 2.0), db1(C, 3.0);
  layernorm_backward(d0.data(), dw0.data(), db0.data(), r.data(), inp.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  layernorm_backward(d1.data(), dw1.data(), db1.data(), r.data(), inp.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  for (int64_t i = 0; i < N * C; ++i) EXPECT_DOUBLE_EQ(d1[i], d0[i] + 1.0);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_DOUBLE_EQ(dw1[c], dw0[c] + 2.0);
    EXPECT_DOUBLE_EQ(db1[c], db0[c] + 3.0);
  }
}

// fp32 rows of 384 (the bench GPT's n_embd: vector lanes only) and 13
// (a tail) against the double-precision kernels.
TEST_F(CpuKernels, LayerNormFp32MatchesDoublePrecision) {
  for (const int64_t C : {int64_t{384}, int64_t{13}}) {
    SCOPED_TRACE(C);
    const int64_t N = 37;
    Vec inp = random_vec(N * C, 81, 3.0), w = random_vec(C, 82), b = random_vec(C, 83),
        r = random_vec(N * C, 84);
    auto to_f = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
    std::vector<float> inp_f = to_f(inp), w_f = to_f(w), b_f = to_f(b), r_f = to_f(r);
    Vec out(N * C), mean(N), rstd(N), dinp(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(),
                       mean.data(), rstd.data(), N, C);
    std::vector<float> out_f(N * C), mean_f(N), rstd_f(N), dinp_f(N * C, 0.0f), dw_f(C, 0.0f),
        db_f(C, 0.0f);
    layernorm_forward(out_f.data(), mean_f.data(), rstd_f.data(), inp_f.data(), w_f.data(),
                      b_f.data(), N, C);
    layernorm_backward(dinp_f.data(), dw_f.data(), db_f.data(), r_f.data(), inp_f.data(),
                       w_f.data(), mean_f.data(), rstd_f.data(), N, C);
    for (int64_t i = 0; i < N * C; ++i) {
      EXPECT_NEAR(out_f[i], out[i], 1e-5 * (1.0 + std::abs(out[i])));
      EXPECT_NEAR(dinp_f[i], dinp[i], 1e-4 * (1.0 + std::abs(dinp[i])));
    }
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_NEAR(dw_f[c], dw[c], 1e-4 * (1.0 + std::abs(dw[c])));
      EXPECT_NEAR(db_f[c], db[c], 1e-4 * (1.0 + std::abs(db[c])));
    }
  }
}

TEST_F(CpuKernels, ResidualLayerNormGivesAddThenLayerNormsBits) {
  const int64_t N = 40, C = 21;
  const Vec a_d = random_vec(N * C, 91), b_d = random_vec(N * C, 92), w_d = random_vec(C, 93),
            bias_d = random_vec(C, 94);
  const std::vector<float> a(a_d.begin(), a_d.end()), b(b_d.begin(), b_d.end()),
      w(w_d.begin(), w_d.end()), bias(bias_d.begin(), bias_d.end());
  std::vector<float> sum(N * C), out(N * C), mean(N), rstd(N);
  add(sum.data(), a.data(), b.data(), N * C);
  layernorm_forward(out.data(), mean.data(), rstd.data(), sum.data(), w.data(), bias.data(), N, C);
  // The runner's call: the output overwrites b.
  std::vector<float> fused_sum(N * C), inout = b, fused_mean(N), fused_rstd(N);
  residual_layernorm_forward(fused_sum.data(), inout.data(), fused_mean.data(), fused_rstd.data(),
                             a.data(), inout.data(), w.data(), bias.data(), N, C);
  EXPECT_EQ(fused_sum, sum);
  EXPECT_EQ(inout, out);
  EXPECT_EQ(fused_mean, mean);
  EXPECT_EQ(fused_rstd, rstd);
}

TEST_F(CpuKernels, GeluBackwardBiasGivesGeluBackwardThenTheBiasGradient) {
  // 100 rows: several row blocks of the bias sum and a partial one.
  const int64_t N = 100, C = 3, OC = 40;
  const Vec x_d = random_vec(N * OC, 95, 2.0), d_d = random_vec(N * OC, 96);
  const std::vector<float> x(x_d.begin(), x_d.end()), d(d_d.begin(), d_d.end());
  const std::vector<float> inp(N * C, 0.5f), w(OC * C, 0.25f);
  std::vector<float> dx(N * OC), dinp(N * C), dw(OC * C, 0.0f), db(OC, 1.0f);
  gelu_backward(dx.data(), x.data(), d.data(), N * OC);
  matmul_backward(dinp.data(), dw.data(), db.data(), dx.data(), inp.data(), w.data(), N, C, OC);
  std::vector<float> fused_dx(N * OC), fused_db(OC, 1.0f);
  gelu_backward_bias(fused_dx.data(), fused_db.data(), x.data(), d.data(), N, OC);
  EXPECT_EQ(fused_dx, dx);
  EXPECT_EQ(fused_db, db);
  for (int64_t o = 0; o < OC; ++o) {
    double want = 1.0;
    for (int64_t n = 0; n < N; ++n) want += dx[n * OC + o];
    EXPECT_NEAR(fused_db[o], want, 1e-5 * N);
  }
}

// The bf16 layers' GELU kernels round as they make each value: the bits of
// the fp32 kernels followed by round_to_bf16, the bias gradient included.
// 100 x 400 elements: several element blocks and rounding chunks, and a
// partial one of each.
TEST_F(CpuKernels, GeluBf16KernelsGiveTheFp32KernelsRounded) {
  const int64_t N = 100, OC = 400;
  const Vec x_d = random_vec(N * OC, 97, 2.0), d_d = random_vec(N * OC, 98);
  const std::vector<float> x(x_d.begin(), x_d.end()), d(d_d.begin(), d_d.end());
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    transformer::cpu::round_to_bf16(out.data(), v.data(), static_cast<int64_t>(v.size()));
    return out;
  };

  std::vector<float> y(N * OC);
  gelu_forward(y.data(), x.data(), N * OC);
  // The rows as a product hands them over, in chunks of 48: kept as they
  // are, and GELU'd with the fp32 kernel's bits, rounded.
  std::vector<float> kept(N * OC);
  std::vector<uint16_t> rows16(N * OC);
  for (int64_t r0 = 0; r0 < N; r0 += 48) {
    const int64_t r1 = std::min<int64_t>(N, r0 + 48);
    gelu_forward_bf16_rows(kept.data(), rows16.data(), x.data() + r0 * OC, r0, r1, OC);
  }
  EXPECT_EQ(kept, x);
  EXPECT_EQ(rows16, to_bf16(y));

  std::vector<float> dx(N * OC), db(OC, 1.0f);
  gelu_backward_bias(dx.data(), db.data(), x.data(), d.data(), N, OC);
  // The rows as a product hands them over: chunks of 48, which split the
  // bias sums' blocks of 32.
  std::vector<uint16_t> dx16(N * OC);
  std::vector<float> db16(OC, 1.0f);
  transformer::cpu::RowSumPartials<float> partials(N, OC);
  for (int64_t r0 = 0; r0 < N; r0 += 48) {
    const int64_t r1 = std::min<int64_t>(N, r0 + 48);
    std::vector<float> rows(d.begin() + r0 * OC, d.begin() + r1 * OC);
    gelu_backward_bias_bf16_rows(dx16.data(), partials, x.data(), rows.data(), r0, r1, OC);
  }
  partials.sum_into(db16.data());
  EXPECT_EQ(dx16, to_bf16(dx));
  EXPECT_EQ(db16, db);
}

// The LayerNorms that write a bf16 operand: the fp32 kernels' bits, rounded;
// mean, rstd and the residual sum unrounded. 40 rows: several row blocks.
TEST_F(CpuKernels, LayerNormBf16KernelsGiveTheFp32KernelsRounded) {
  const int64_t N = 40, C = 48;
  auto floats = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  const auto a = floats(random_vec(N * C, 91, 2.0)), b = floats(random_vec(N * C, 92));
  const auto w = floats(random_vec(C, 93)), bias = floats(random_vec(C, 94));
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    transformer::cpu::round_to_bf16(out.data(), v.data(), static_cast<int64_t>(v.size()));
    return out;
  };

  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), a.data(), w.data(), bias.data(), N, C);
  std::vector<uint16_t> out16(N * C);
  std::vector<float> mean16(N), rstd16(N);
  layernorm_forward_bf16(out16.data(), mean16.data(), rstd16.data(), a.data(), w.data(),
                         bias.data(), N, C);
  EXPECT_EQ(out16, to_bf16(out));
  EXPECT_EQ(mean16, mean);
  EXPECT_EQ(rstd16, rstd);

  std::vector<float> sum(N * C);
  residual_layernorm_forward(sum.data(), out.data(), mean.data(), rstd.data(), a.data(), b.data(),
                             w.data(), bias.data(), N, C);
  std::vector<float> sum16(N * C);
  residual_layernorm_forward_bf16(sum16.data(), out16.data(), mean16.data(), rstd16.data(),
                                  a.data(), b.data(), w.data(), bias.data(), N, C);
  EXPECT_EQ(sum16, sum);
  EXPECT_EQ(out16, to_bf16(out));
  EXPECT_EQ(mean16, mean);
  EXPECT_EQ(rstd16, rstd);
}

TEST_F(CpuKernels, MatmulBackwardMatchesFiniteDifferences) {
  const int64_t N = 4, C = 3, OC = 5;
  Vec inp = random_vec(N * C, 11), w = random_vec(OC * C, 12), b = random_vec(OC, 13),
      r = random_vec(N * OC, 14);
  auto f = [&] {
    Vec out(N * OC);
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return dot(out, r);
  };
  Vec dinp(N * C), dw(OC * C, 0.0), db(OC, 0.0);
  matmul_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, C, OC);
  expect_gradient("dinp", &inp, dinp, f);
  expect_gradient("dweight", &w, dw, f);
  expect_gradient("dbias", &b, db, f);
}

TEST_F(CpuKernels, MatmulSplitAcrossTasksEqualsOneCall) {
  // Large enough for gemm() to split by row blocks: the result must not
  // depend on the split (each block is an independent BLAS call).
  const int64_t N = 300, C = 64, OC = 48;
  Vec inp = random_vec(N * C, 15), w = random_vec(OC * C, 16);
  Vec split(N * OC), whole(N * OC, 0.0);
  matmul_forward(split.data(), inp.data(), w.data(), static_cast<const double*>(nullptr), N, C, OC);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t c = 0; c < C; ++c) whole[n * OC + o] += inp[n * C + c] * w[o * C + c];
  for (int64_t i = 0; i < N * OC; ++i)
    EXPECT_NEAR(split[i], whole[i], 1e-12 * std::max(1.0, std::abs(whole[i])));
}

TEST_F(CpuKernels, GeluBackwardMatchesFiniteDifferences) {
  const int64_t n = 9;
  Vec inp = random_vec(n, 31, 2.0), r = random_vec(n, 32);
  auto f = [&] {
    Vec out(n);
    gelu_forward(out.data(), inp.data(), n);
    return dot(out, r);
  };
  Vec d(n);
  gelu_backward(d.data(), inp.data(), r.data(), n);
  expect_gradient("dinp", &inp, d, f);
}

TEST_F(CpuKernels, EncoderBackwardMatchesFiniteDifferences) {
  const int64_t B = 2, Tn = 3, C = 4, V = 5;
  const std::vector<int32_t> tokens = {1, 4, 1, 0, -1, 1};  // repeats and a padding id
  Vec wte = random_vec(V * C, 41), wpe = random_vec(Tn * C, 42), r = random_vec(B * Tn * C, 43);
  auto f = [&] {
    Vec out(B * Tn * C);
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
    return dot(out, r);
  };
  Vec dwte(V * C, 0.0), dwpe(Tn * C, 0.0);
  encoder_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, Tn, C);
  expect_gradient("dwte", &wte, dwte, f);
  expect_gradient("dwpe", &wpe, dwpe, f);
}

TEST_F(CpuKernels, LmHeadBackwardMatchesFiniteDifferences) {
  const int64_t N = 5, C = 4, V = 7;
  const std::vector<int32_t> targets = {3, 0, -1, 6, 3};
  Vec x = random_vec(N * C, 51), wte = random_vec(V * C, 52);
  auto f = [&] {
    return lm_head_forward(x.data(), wte.data(), targets.data(), N, C, V, nullptr, 0, nullptr);
  };
  Vec dx(N * C), dwte(V * C, 0.0);
  const double loss = lm_head_forward_backward(dx.data(), dwte.data(), x.data(), wte.data(),
                                               targets.data(), N, C, V, 1.0);
  EXPECT_NEAR(loss, f(), 1e-12);
  // The loss by definition: sum over counted rows of logsumexp - target logit.
  double expected = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    std::vector<double> z(V);
    double mx = -1e300;
    for (int64_t v = 0; v < V; ++v) {
      z[v] = 0;
      for (int64_t c = 0; c < C; ++c) z[v] += x[n * C + c] * wte[v * C + c];
      mx = std::max(mx, z[v]);
    }
    double s = 0;
    for (double zv : z) s += std::exp(zv - mx);
    expected += mx + std::log(s) - z[targets[n]];
  }
  EXPECT_NEAR(loss, expected, 1e-12);
  expect_gradient("dx", &x, dx, f);
  expect_gradient("dwte", &wte, dwte, f);
  for (int64_t c = 0; c < C; ++c)
    EXPECT_EQ(dx[2 * C + c], 0.0) << "an ignored row gets no gradient";
}

TEST_F(CpuKernels, LmHeadLogitsOfChosenRows) {
  const int64_t N = 3, C = 2, V = 4;
  Vec x = random_vec(N * C, 61), wte = random_vec(V * C, 62);
  const int64_t rows[2] = {2, 0};
  std::vector<float> logits(2 * V);
  lm_head_forward(x.data(), wte.data(), static_cast<const int32_t*>(nullptr), N, C, V, rows, 2,
                  logits.data());
  for (int i = 0; i < 2; ++i)
    for (int64_t v = 0; v < V; ++v) {
      const double z = x[rows[i] * C] * wte[v * C] + x[rows[i] * C + 1] * wte[v * C + 1];
      EXPECT_NEAR(logits[i * V + v], z, 1e-6);
    }
}

}  // namespace
}  // namespace dscore::gpt::cpu
