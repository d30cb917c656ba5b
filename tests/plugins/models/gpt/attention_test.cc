// The tiled causal attention of the CPU backend
// (plugins/models/transformer_common/cpu/attention.cc, on GPT's packed qkv through
// cpu/attention.h): its backward against central finite differences in double (tolerance as
// kernels_test.cc: 1e-6 relative), its forward against a plain softmax
// attention (naive_attention.h; fp32 within 2e-5 relative), on shapes that
// cross the tile edges, and its results bitwise equal at 1 and 2 threads.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "tests/plugins/models/transformer_common/naive_attention.h"
#include "transformer_common/cpu/gemm.h"

namespace dscore::gpt::cpu {
namespace {

template <typename T>
std::vector<T> random_vec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

struct Shape {
  int64_t B, Tn, C, NH;
};

// Not multiples of the tiles, one position, one and several heads.
const Shape kShapes[] = {
    {2, 1, 8, 2},
    {1, kAttentionQueryBlock + kAttentionKeyBlock / 2 + 5, 24, 3},
    {2, 2 * kAttentionQueryBlock + 1, 32, 4},
    {1, 7, 6, 1},
};

class CpuAttention : public ::testing::Test {
 protected:
  void SetUp() override { transformer::cpu::load_gemm_library(); }
};

TEST_F(CpuAttention, TiledForwardEqualsPlainSoftmaxAttention) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("B " + std::to_string(s.B) + " T " + std::to_string(s.Tn) + " C " +
                 std::to_string(s.C) + " NH " + std::to_string(s.NH));
    const auto qkv = random_vec<float>(s.B * s.Tn * 3 * s.C, 31);
    std::vector<float> out(static_cast<size_t>(s.B * s.Tn * s.C)),
        lse(static_cast<size_t>(attention_state_elements(s.B, s.Tn, s.NH)));
    attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.Tn, s.C, s.NH);
    std::vector<double> want_out, want_lse;
    transformer::testing::naive_attention(&want_out, &want_lse, qkv.data(), qkv.data() + s.C,
                                          qkv.data() + 2 * s.C,
                                          packed_attention_shape(s.B, s.Tn, s.C, s.NH));
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], want_out[i], 2e-5 * std::max(1.0, std::abs(want_out[i]))) << "out " << i;
    for (size_t i = 0; i < lse.size(); ++i)
      ASSERT_NEAR(lse[i], want_lse[i], 2e-5 * std::max(1.0, std::abs(want_lse[i]))) << "lse " << i;
  }
}

// sum(out * R) for a fixed random R, so backward gets dout = R.
TEST_F(CpuAttention, BackwardMatchesFiniteDifferences) {
  // One tile, and enough positions to cross query and key tiles.
  for (const Shape& s : {Shape{2, 4, 6, 2}, Shape{1, kAttentionQueryBlock + 7, 4, 2}}) {
    SCOPED_TRACE("T " + std::to_string(s.Tn));
    const int64_t n_out = s.B * s.Tn * s.C;
    auto qkv = random_vec<double>(n_out * 3, 21);
    const auto r = random_vec<double>(n_out, 22);
    std::vector<double> out(static_cast<size_t>(n_out)),
        lse(static_cast<size_t>(attention_state_elements(s.B, s.Tn, s.NH))),
        dqkv(static_cast<size_t>(n_out * 3));
    auto f = [&] {
      attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.Tn, s.C, s.NH);
      double sum = 0;
      for (size_t i = 0; i < out.size(); ++i) sum += out[i] * r[i];
      return sum;
    };
    f();
    attention_backward(dqkv.data(), r.data(), qkv.data(), out.data(), lse.data(), s.B, s.Tn, s.C,
                       s.NH);
    const double h = 1e-5;
    for (size_t i = 0; i < qkv.size(); ++i) {
      const double keep = qkv[i];
      qkv[i] = keep + h;
      const double up = f();
      qkv[i] = keep - h;
      const double down = f();
      qkv[i] = keep;
      const double numeric = (up - down) / (2 * h);
      ASSERT_NEAR(dqkv[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "dqkv[" << i << "]";
    }
  }
}

TEST_F(CpuAttention, IsCausal) {
  const Shape s{1, kAttentionQueryBlock + 3, 4, 2};
  auto qkv = random_vec<double>(s.B * s.Tn * 3 * s.C, 23);
  std::vector<double> out(static_cast<size_t>(s.B * s.Tn * s.C)),
      lse(static_cast<size_t>(attention_state_elements(s.B, s.Tn, s.NH)));
  attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.Tn, s.C, s.NH);
  const auto before = out;
  for (int64_t c = 0; c < 3 * s.C; ++c) qkv[(s.Tn - 1) * 3 * s.C + c] += 1.0;  // the last position
  attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.Tn, s.C, s.NH);
  for (int64_t i = 0; i < (s.Tn - 1) * s.C; ++i)
    EXPECT_EQ(out[i], before[i]) << "position " << i / s.C;
}

// Fixed tiles and task boundaries: one thread and two give the same bits.
TEST_F(CpuAttention, BitwiseEqualAcrossThreadCounts) {
  const Shape s{2, 2 * kAttentionQueryBlock + 9, 32, 4};
  const int64_t n_out = s.B * s.Tn * s.C;
  const auto qkv = random_vec<float>(n_out * 3, 41), dout = random_vec<float>(n_out, 42);
  struct Result {
    std::vector<float> out, lse, dqkv;
  };
  auto run = [&](size_t threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    Result r{std::vector<float>(static_cast<size_t>(n_out)),
             std::vector<float>(static_cast<size_t>(attention_state_elements(s.B, s.Tn, s.NH))),
             std::vector<float>(static_cast<size_t>(n_out * 3))};
    attention_forward(r.out.data(), r.lse.data(), qkv.data(), s.B, s.Tn, s.C, s.NH);
    attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), s.B,
                       s.Tn, s.C, s.NH);
    return r;
  };
  const Result one = run(1), two = run(2);
  EXPECT_EQ(one.out, two.out);
  EXPECT_EQ(one.lse, two.lse);
  EXPECT_EQ(one.dqkv, two.dqkv);
}

}  // namespace
}  // namespace dscore::gpt::cpu
