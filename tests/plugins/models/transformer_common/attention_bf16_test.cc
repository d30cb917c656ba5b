// Attention with bf16 products (plugins/models/transformer_common/cpu/attention_bf16.cc) on
// inputs that are bf16 values, so rounding q, k and v loses nothing and the
// differences come from rounding the probabilities, dout and dS only:
// - forward against a plain softmax attention in double: the logsumexp
//   (fp32 sums of exact products) within 1e-5 relative, the output within
//   2^-8 of the largest |v| (each probability is off by at most 2^-9 of
//   itself, and they sum to 1);
// - backward against the fp32 tiled backward (attention.cc, itself checked
//   against finite differences) within 2^-7 (7.8e-3) of each gradient's
//   largest element: dout, P and dS carry a relative 2^-9 each into sums
//   over up to T terms of either sign (seen: at most 3.3e-3 on these
//   shapes; a dv 1% off fails);
// - grouped-query heads, T across and off the 64-row blocks, head_dim 20,
//   and rows with padding (GPT's packed q|k|v);
// - one thread, two and four giving the same bits;
// - each on oneDNN's products and on the AMX tiles' (attention_products.h),
//   the latter on the bench GPT's 64-channel heads over many groups too.
// Skipped, with the reason, where the build or the CPU has no bf16 GEMM
// (the AMX runs: where the CPU has no AMX).
#include "transformer_common/cpu/attention_bf16.h"

#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/plugins/models/transformer_common/bf16_kernels.h"
#include "tests/plugins/models/transformer_common/naive_attention.h"
#include "transformer_common/cpu/gemm.h"
#include "transformer_common/cpu/gemm_bf16.h"

namespace dscore::transformer::cpu {
namespace {

#define SKIP_WITHOUT_BF16_GEMM() \
  if (!bf16_gemm_available())    \
  GTEST_SKIP() << "no bf16 GEMM here: " << bf16_gemm_unavailable_reason()

// q rows of stride q_ld (NH heads of hd), k and v rows of kv_ld (NKV
// heads), out rows of out_ld; pad channels past the heads.
AttentionShape shape(int64_t B, int64_t Tn, int64_t NH, int64_t NKV, int64_t hd, int64_t pad) {
  return {B, Tn, NH, NKV, hd, NH * hd + pad, NKV * hd + pad, NH * hd + pad};
}

std::string describe(const AttentionShape& s) {
  return "B " + std::to_string(s.B) + " T " + std::to_string(s.Tn) + " NH " + std::to_string(s.NH) +
         " NKV " + std::to_string(s.NKV) + " hd " + std::to_string(s.head_dim) + " q_ld " +
         std::to_string(s.q_ld);
}

// n normal values, each a bf16 value.
std::vector<float> bf16_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = sdk::bf16_to_float(sdk::float_to_bf16(normal(rng)));
  return v;
}

struct Inputs {
  Inputs(const AttentionShape& s, uint32_t seed)
      : q(bf16_values(s.B * s.Tn * s.q_ld, seed)),
        k(bf16_values(s.B * s.Tn * s.kv_ld, seed + 1)),
        v(bf16_values(s.B * s.Tn * s.kv_ld, seed + 2)),
        dout(bf16_values(s.B * s.Tn * s.out_ld, seed + 3)) {}
  std::vector<float> q, k, v, dout;
};

struct Results {
  std::vector<float> out, lse, dq, dk, dv;
  bool operator==(const Results&) const = default;
};

Results run(const Inputs& x, const AttentionShape& s, bool bf16) {
  Results r;
  r.out.assign(x.dout.size(), 0.0f);
  r.lse.assign(static_cast<size_t>(attention_state_elements(s.B, s.Tn, s.NH)), 0.0f);
  r.dq.assign(x.q.size(), 0.0f);
  r.dk.assign(x.k.size(), 0.0f);
  r.dv.assign(x.v.size(), 0.0f);
  if (bf16) {
    attention_forward_bf16(r.out.data(), r.lse.data(), x.q.data(), x.k.data(), x.v.data(), s);
    attention_backward_bf16(r.dq.data(), r.dk.data(), r.dv.data(), x.dout.data(), x.q.data(),
                            x.k.data(), x.v.data(), r.out.data(), r.lse.data(), s);
  } else {
    attention_forward(r.out.data(), r.lse.data(), x.q.data(), x.k.data(), x.v.data(), s);
    attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), x.dout.data(), x.q.data(), x.k.data(),
                       x.v.data(), r.out.data(), r.lse.data(), s);
  }
  return r;
}

// The channels of the heads in rows of stride ld (the padding is not
// written).
bool in_head(size_t i, int64_t ld, int64_t heads, int64_t hd) {
  return static_cast<int64_t>(i) % ld < heads * hd;
}

float largest(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

const AttentionShape kShapes[] = {
    shape(2, 2 * kAttentionQueryBlock + 29, 4, 2, 20, 0),  // GQA, T off the blocks
    shape(1, kAttentionQueryBlock, 6, 6, 16, 2 * 6 * 16),  // GPT's packed rows: ld 3C
    shape(2, 7, 3, 1, 8, 3),                               // one short block, padded rows
    // The bench GPT's heads (64 channels), many groups over several threads.
    shape(4, 4 * kAttentionQueryBlock, 4, 4, 64, 2 * 4 * 64),
};

// Each test runs on oneDNN's products and, where the CPU has AMX, on the
// tiles' (attention_products.h).
class AttentionBf16 : public Bf16Kernels {};
INSTANTIATE_TEST_SUITE_P(Products, AttentionBf16, ::testing::Values(true, false), bf16_kernel_name);

TEST_P(AttentionBf16, ForwardMatchesPlainAttentionWithinTheProbabilitiesRounding) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const AttentionShape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const Inputs x(s, 7);
    const Results got = run(x, s, true);
    std::vector<double> want_out, want_lse;
    testing::naive_attention(&want_out, &want_lse, x.q.data(), x.k.data(), x.v.data(), s);
    const double out_tol = std::ldexp(largest(x.v), -8);
    for (size_t i = 0; i < got.out.size(); ++i) {
      if (!in_head(i, s.out_ld, s.NH, s.head_dim)) continue;
      ASSERT_NEAR(got.out[i], want_out[i], out_tol) << "out " << i;
    }
    for (size_t i = 0; i < got.lse.size(); ++i)
      ASSERT_NEAR(got.lse[i], want_lse[i], 1e-5 * std::max(1.0, std::abs(want_lse[i])))
          << "lse " << i;
  }
}

TEST_P(AttentionBf16, BackwardMatchesTheFp32TilesWithinBf16Rounding) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const AttentionShape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const Inputs x(s, 11);
    const Results got = run(x, s, true), want = run(x, s, false);
    auto expect_close = [&](const char* name, const std::vector<float>& g,
                            const std::vector<float>& w, int64_t ld, int64_t heads) {
      const double tol = std::ldexp(largest(w), -7);
      ASSERT_GT(tol, 0.0) << name;
      for (size_t i = 0; i < g.size(); ++i) {
        if (!in_head(i, ld, heads, s.head_dim)) continue;
        ASSERT_NEAR(g[i], w[i], tol) << name << " " << i;
      }
    };
    expect_close("dq", got.dq, want.dq, s.q_ld, s.NH);
    expect_close("dk", got.dk, want.dk, s.kv_ld, s.NKV);
    expect_close("dv", got.dv, want.dv, s.kv_ld, s.NKV);
  }
}

TEST_P(AttentionBf16, WritesOnlyTheHeadsChannels) {
  SKIP_WITHOUT_BF16_GEMM();
  const AttentionShape s = kShapes[2];
  const Inputs x(s, 13);
  const Results got = run(x, s, true);  // run() fills every buffer with zeros first
  for (size_t i = 0; i < got.out.size(); ++i) {
    if (in_head(i, s.out_ld, s.NH, s.head_dim)) continue;
    ASSERT_EQ(got.out[i], 0.0f) << "out " << i;
  }
  for (size_t i = 0; i < got.dk.size(); ++i) {
    if (in_head(i, s.kv_ld, s.NKV, s.head_dim)) continue;
    ASSERT_EQ(got.dk[i], 0.0f) << "dk " << i;
  }
}

// The forward's rounded heads kept by the caller: the backward reads them
// instead of q, k and v (passed as nullptr) and gives the bits of rounding
// them again. Inputs off the bf16 grid, so the rounding matters.
TEST_P(AttentionBf16, KeptHeadsGiveTheBitsOfRoundingAgain) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const AttentionShape& s : kShapes) {
    Inputs x(s, 29);
    std::mt19937 rng(31);
    std::normal_distribution<float> noise(0.0f, 1e-3f);
    for (auto* v : {&x.q, &x.k, &x.v, &x.dout})
      for (float& e : *v) e += noise(rng);
    const Results own = run(x, s, true);
    Results kept = own;
    for (auto* v : {&kept.out, &kept.lse, &kept.dq, &kept.dk, &kept.dv})
      std::fill(v->begin(), v->end(), 0.0f);
    std::vector<uint16_t> heads(static_cast<size_t>(attention_bf16_heads_elements(s)));
    attention_forward_bf16(kept.out.data(), kept.lse.data(), x.q.data(), x.k.data(), x.v.data(), s,
                           vector_isa(), heads.data());
    attention_backward_bf16(kept.dq.data(), kept.dk.data(), kept.dv.data(), x.dout.data(), nullptr,
                            nullptr, nullptr, kept.out.data(), kept.lse.data(), s, vector_isa(),
                            heads.data());
    EXPECT_TRUE(kept == own) << describe(s);
  }
}

TEST_P(AttentionBf16, BitwiseEqualAcrossThreadCounts) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const AttentionShape& s : {kShapes[0], kShapes[3]}) {
    const Inputs x(s, 17);
    auto with_threads = [&](size_t threads) {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
      return run(x, s, true);
    };
    const Results one = with_threads(1);
    EXPECT_TRUE(one == with_threads(2)) << describe(s);
    EXPECT_TRUE(one == with_threads(4)) << describe(s);
  }
}

}  // namespace
}  // namespace dscore::transformer::cpu
