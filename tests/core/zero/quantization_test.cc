// ZeRO++'s blockwise quantization and its quantized reduce-scatter: each
// value within half a step of its block, the layout's sizes, and the
// two-hop reduction (within nodes, then across) on loopback ranks against
// the exact sum within the bound its two quantizations allow.
#include "core/zero/quantization.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>
#include <vector>

#include "core/tensor/dtype_ops.h"
#include "core/zero/quantized_reduce.h"
#include "tests/core/comm/loopback_ranks.h"

namespace dscore::zero {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// The largest magnitude of each value's block.
std::vector<float> block_absmax(const std::vector<float>& v, QuantBits bits) {
  const size_t block = static_cast<size_t>(quant_block(bits));
  std::vector<float> out(v.size());
  for (size_t b = 0; b < v.size(); b += block) {
    float m = 0;
    for (size_t i = b; i < std::min(v.size(), b + block); ++i) m = std::max(m, std::fabs(v[i]));
    for (size_t i = b; i < std::min(v.size(), b + block); ++i) out[i] = m;
  }
  return out;
}

TEST(Quantization, EveryValueIsWithinHalfAStepOfItsBlock) {
  for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
    const int64_t block = quant_block(bits);
    const int64_t n = 3 * block + 77;  // a partial last block
    std::vector<float> v = random_values(n, 1);
    for (int64_t i = block; i < 2 * block; ++i) v[i] *= 1000;  // one loud block
    const std::vector<float> absmax = block_absmax(v, bits);
    const float range = bits == QuantBits::kInt8 ? 127.0f : 7.0f;
    std::vector<char> q(static_cast<size_t>(quantized_bytes(n, bits)));
    quantize(v.data(), DSCORE_DTYPE_F32, n, bits, q.data());
    std::vector<float> back(v.size());
    dequantize(q.data(), n, bits, back.data(), DSCORE_DTYPE_F32);
    int exact_max = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const float half_step = absmax[i] / range / 2;
      ASSERT_LE(std::fabs(back[i] - v[i]), half_step * 1.0001f) << "value " << i;
      exact_max += std::fabs(back[i]) == absmax[i];
    }
    EXPECT_GE(exact_max, 4) << "each block's largest value is a whole code";
    // The quiet blocks keep their own resolution beside the loud one.
    EXPECT_LT(std::fabs(back[5] - v[5]), absmax[5] / range);
    std::vector<float> added(v.size(), 1.0f);
    dequantize_add(q.data(), n, bits, added.data());
    for (size_t i = 0; i < v.size(); i += 101) EXPECT_EQ(added[i], 1.0f + back[i]);
  }
  // codes (padded to 8 bytes) then one fp32 scale per block
  EXPECT_EQ(quant_block(QuantBits::kInt8), 4096);
  EXPECT_EQ(quant_block(QuantBits::kInt4), 256);
  EXPECT_EQ(quantized_bytes(3 * 4096 + 77, QuantBits::kInt8), 3 * 4096 + 80 + 4 * 4);
  EXPECT_EQ(quantized_bytes(3 * 256 + 77, QuantBits::kInt4), 384 + 40 + 4 * 4);
}

TEST(Quantization, ZeroBlocksAndSixteenBitInputs) {
  std::vector<float> zeros(100, 0.0f);
  std::vector<char> q(static_cast<size_t>(quantized_bytes(100, QuantBits::kInt4)));
  quantize(zeros.data(), DSCORE_DTYPE_F32, 100, QuantBits::kInt4, q.data());
  std::vector<float> back(100, 5.0f);
  dequantize(q.data(), 100, QuantBits::kInt4, back.data(), DSCORE_DTYPE_F32);
  for (float x : back) EXPECT_EQ(x, 0.0f);

  const std::vector<float> v = random_values(1000, 2);
  std::vector<uint16_t> bf16(v.size());
  tensor::convert(v.data(), DSCORE_DTYPE_F32, bf16.data(), DSCORE_DTYPE_BF16, 1000);
  std::vector<float> widened(v.size());
  tensor::convert(bf16.data(), DSCORE_DTYPE_BF16, widened.data(), DSCORE_DTYPE_F32, 1000);
  std::vector<char> q8(static_cast<size_t>(quantized_bytes(1000, QuantBits::kInt8)));
  std::vector<char> q8f(q8.size());
  quantize(bf16.data(), DSCORE_DTYPE_BF16, 1000, QuantBits::kInt8, q8.data());
  quantize(widened.data(), DSCORE_DTYPE_F32, 1000, QuantBits::kInt8, q8f.data());
  EXPECT_EQ(q8, q8f) << "bf16 input quantizes as its fp32 value";
  std::vector<uint16_t> out(v.size());
  dequantize(q8.data(), 1000, QuantBits::kInt8, out.data(), DSCORE_DTYPE_BF16);
  std::vector<float> expect(v.size());
  dequantize(q8.data(), 1000, QuantBits::kInt8, expect.data(), DSCORE_DTYPE_F32);
  std::vector<uint16_t> rounded(v.size());
  tensor::convert(expect.data(), DSCORE_DTYPE_F32, rounded.data(), DSCORE_DTYPE_BF16, 1000);
  EXPECT_EQ(out, rounded);
}

// Four loopback ranks as 2 nodes of 2: every rank's chunk against the exact
// average, one hop and two.
TEST(QuantizedReduceScatter, OneAndTwoHopsAreTheSumWithinTheirQuantizationBound) {
  constexpr int kWorld = 4, kLocal = 2;
  const int64_t chunk = 20 * quant_block(QuantBits::kInt4) + 5;
  std::vector<std::vector<float>> send(kWorld);
  for (int r = 0; r < kWorld; ++r) send[r] = random_values(chunk * kWorld, 10 + r, 1.0f + r);
  for (bool two_hops : {false, true}) {
    SCOPED_TRACE(two_hops ? "two hops" : "one hop");
    std::vector<std::vector<float>> out(kWorld, std::vector<float>(chunk));
    std::mutex failures;
    std::string failed;
    comm::testing::run_loopback_ranks(kWorld, [&](comm::Communicator& comm) {
      const int me = comm.rank();
      QuantizedReduceGroups groups;
      std::unique_ptr<comm::Communicator> node, across;
      if (two_hops) {
        node = std::move(comm.split(me / kLocal, me)).value();
        across = std::move(comm.split(me % kLocal, me)).value();
        groups = {node.get(), across.get()};
      }
      Status s = quantized_reduce_scatter(comm, groups, send[me].data(), DSCORE_DTYPE_F32, chunk,
                                          DSCORE_REDUCE_AVG, out[me].data(), nullptr);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(failures);
        failed += s.message();
      }
    });
    ASSERT_EQ(failed, "");
    for (int r = 0; r < kWorld; ++r) {
      // Exact average, and the bound: half a step of each sender's block
      // (int4: absmax / 14), plus, for two hops, half a step of each node
      // sum's block.
      std::vector<float> exact(chunk, 0.0f), bound(chunk, 0.0f);
      std::vector<std::vector<float>> node_sums(kWorld / kLocal, std::vector<float>(chunk, 0.0f));
      for (int s = 0; s < kWorld; ++s) {
        const std::vector<float> mine(send[s].begin() + r * chunk,
                                      send[s].begin() + (r + 1) * chunk);
        const std::vector<float> m = block_absmax(mine, QuantBits::kInt4);
        for (int64_t i = 0; i < chunk; ++i) {
          exact[i] += mine[i];
          bound[i] += m[i] / 14;
          node_sums[s / kLocal][i] += mine[i];
        }
      }
      if (two_hops)
        for (const std::vector<float>& ns : node_sums) {
          const std::vector<float> m = block_absmax(ns, QuantBits::kInt4);
          for (int64_t i = 0; i < chunk; ++i) bound[i] += (m[i] + bound[i]) / 14;
        }
      double worst = 0, mean_error = 0;
      for (int64_t i = 0; i < chunk; ++i) {
        const double err = std::fabs(out[r][i] - exact[i] / kWorld);
        ASSERT_LE(err, bound[i] / kWorld * 1.001 + 1e-6) << "rank " << r << " value " << i;
        worst = std::max(worst, err / (bound[i] / kWorld));
        mean_error += err;
      }
      EXPECT_GT(worst, 0.05) << "no quantization error at all: not quantized?";
      // Unbiased rounding: the errors mostly cancel.
      EXPECT_LT(mean_error / chunk, 0.35 * bound[0] / kWorld);
    }
  }
}

}  // namespace
}  // namespace dscore::zero
