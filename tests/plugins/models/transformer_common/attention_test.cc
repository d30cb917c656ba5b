// The shared tiled attention with grouped-query heads (NKV < NH) and
// separate q, k, v buffers (plugins/models/transformer_common/cpu/attention.cc): its
// forward against a plain softmax attention where query head h reads
// key/value head h / (NH / NKV) (transformers' repeat_kv), fp32 within
// 2e-5 relative; its backward against central finite differences in
// double (gradient_check.h's tolerance), on shapes that cross the tiles;
// and one thread and two, and every ISA this CPU has, giving the same bits.
#include "transformer_common/cpu/attention.h"

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/plugins/models/transformer_common/gradient_check.h"
#include "tests/plugins/models/transformer_common/naive_attention.h"
#include "transformer_common/cpu/gemm.h"

namespace dscore::transformer::cpu {
namespace {

using testing::random_vec;
using testing::Vec;

AttentionShape gqa(int64_t B, int64_t Tn, int64_t NH, int64_t NKV, int64_t hd) {
  return {B, Tn, NH, NKV, hd, NH * hd, NKV * hd, NH * hd};
}

// Inputs of one shape: q (B, T, NH hd), k and v (B, T, NKV hd).
template <typename T>
struct Inputs {
  Inputs(const AttentionShape& s, uint32_t seed)
      : q(fill(s.B * s.Tn * s.q_ld, seed)),
        k(fill(s.B * s.Tn * s.kv_ld, seed + 1)),
        v(fill(s.B * s.Tn * s.kv_ld, seed + 2)) {}
  static std::vector<T> fill(int64_t n, uint32_t seed) {
    const Vec r = random_vec(static_cast<size_t>(n), seed);
    return std::vector<T>(r.begin(), r.end());
  }
  std::vector<T> q, k, v;
};

std::string describe(const AttentionShape& s) {
  return "B " + std::to_string(s.B) + " T " + std::to_string(s.Tn) + " NH " + std::to_string(s.NH) +
         " NKV " + std::to_string(s.NKV) + " hd " + std::to_string(s.head_dim);
}

class GqaAttention : public ::testing::Test {
 protected:
  void SetUp() override { load_gemm_library(); }
};

TEST_F(GqaAttention, TiledForwardEqualsPlainSoftmaxAttention) {
  for (const AttentionShape& s :
       {gqa(2, 5, 4, 2, 4), gqa(1, kAttentionQueryBlock + kAttentionKeyBlock / 2 + 5, 6, 2, 8),
        gqa(2, 2 * kAttentionQueryBlock + 1, 4, 1, 16), gqa(1, 7, 3, 3, 2)}) {
    SCOPED_TRACE(describe(s));
    const Inputs<float> x(s, 31);
    std::vector<float> out(static_cast<size_t>(s.B * s.Tn * s.out_ld)),
        lse(static_cast<size_t>(attention_state_elements(s.B, s.Tn, s.NH)));
    attention_forward(out.data(), lse.data(), x.q.data(), x.k.data(), x.v.data(), s);
    Vec want_out, want_lse;
    testing::naive_attention(&want_out, &want_lse, x.q.data(), x.k.data(), x.v.data(), s);
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], want_out[i], 2e-5 * std::max(1.0, std::abs(want_out[i]))) << "out " << i;
    for (size_t i = 0; i < lse.size(); ++i)
      ASSERT_NEAR(lse[i], want_lse[i], 2e-5 * std::max(1.0, std::abs(want_lse[i]))) << "lse " << i;
  }
}

TEST_F(GqaAttention, BackwardMatchesFiniteDifferences) {
  for (const AttentionShape& s : {gqa(2, 4, 4, 2, 2), gqa(1, kAttentionQueryBlock + 7, 4, 1, 2)}) {
    SCOPED_TRACE(describe(s));
    Inputs<double> x(s, 21);
    const Vec r = random_vec(static_cast<size_t>(s.B * s.Tn * s.out_ld), 24);
    Vec out(r.size()), lse(static_cast<size_t>(attention_state_elements(s.B, s.Tn, s.NH)));
    auto f = [&] {
      attention_forward(out.data(), lse.data(), x.q.data(), x.k.data(), x.v.data(), s);
      return testing::dot(out, r);
    };
    f();
    Vec dq(x.q.size()), dk(x.k.size()), dv(x.v.size());
    attention_backward(dq.data(), dk.data(), dv.data(), r.data(), x.q.data(), x.k.data(),
                       x.v.data(), out.data(), lse.data(), s);
    testing::expect_gradient("dq", &x.q, dq, f);
    testing::expect_gradient("dk", &x.k, dk, f);
    testing::expect_gradient("dv", &x.v, dv, f);
  }
}

TEST_F(GqaAttention, BitwiseEqualAcrossThreadCounts) {
  const AttentionShape s = gqa(2, 2 * kAttentionQueryBlock + 9, 8, 2, 8);
  const Inputs<float> x(s, 41);
  const Inputs<float> dout_source(s, 45);
  const std::vector<float>& dout = dout_source.q;
  auto run = [&](size_t threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    std::vector<float> out(dout.size()),
        lse(static_cast<size_t>(attention_state_elements(s.B, s.Tn, s.NH))), dq(x.q.size()),
        dk(x.k.size()), dv(x.v.size());
    attention_forward(out.data(), lse.data(), x.q.data(), x.k.data(), x.v.data(), s);
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), x.q.data(), x.k.data(),
                       x.v.data(), out.data(), lse.data(), s);
    return std::vector<std::vector<float>>{out, lse, dq, dk, dv};
  };
  EXPECT_EQ(run(1), run(2));
}

// The row work is compiled per ISA (cpu/isa_target.h); each must give the
// baseline's bits, on rows whose lengths leave every remainder of the
// 16-lane reductions (T not a multiple of the tiles, head_dim 20 and 8).
TEST_F(GqaAttention, BitwiseEqualOnEveryIsa) {
  std::vector<VectorIsa> isas = {VectorIsa::kScalar};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    isas.push_back(VectorIsa::kAvx2);
  if (__builtin_cpu_supports("avx512f")) isas.push_back(VectorIsa::kAvx512);
  for (const AttentionShape& s :
       {gqa(2, 2 * kAttentionQueryBlock + 29, 4, 2, 20), gqa(1, kAttentionKeyBlock + 3, 2, 2, 8)}) {
    SCOPED_TRACE(describe(s));
    const Inputs<float> x(s, 51);
    const std::vector<float> dout = Inputs<float>::fill(s.B * s.Tn * s.out_ld, 55);
    auto run = [&](VectorIsa isa) {
      std::vector<float> out(dout.size()),
          lse(static_cast<size_t>(attention_state_elements(s.B, s.Tn, s.NH))), dq(x.q.size()),
          dk(x.k.size()), dv(x.v.size());
      attention_forward(out.data(), lse.data(), x.q.data(), x.k.data(), x.v.data(), s, isa);
      attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), x.q.data(), x.k.data(),
                         x.v.data(), out.data(), lse.data(), s, isa);
      return std::vector<std::vector<float>>{out, lse, dq, dk, dv};
    };
    const auto want = run(VectorIsa::kScalar);
    for (VectorIsa isa : isas) EXPECT_EQ(run(isa), want) << vector_isa_name(isa);
  }
}

}  // namespace
}  // namespace dscore::transformer::cpu
