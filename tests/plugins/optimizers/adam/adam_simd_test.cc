// The vectorised Adam kernels (plugins/optimizers/adam/adam_avx2.cc,
// adam_avx512.cc) against the readable reference loop (adam_update.h) and
// each other: BITWISE equal parameters, moments and 16-bit copies on random
// inputs of sizes that leave every tail length, for every gradient dtype,
// 16-bit copy dtype, weight-decay mode, weight decay on and off and bias
// correction on and off, and the multi-core driver equal to a
// single-threaded run of the reference. A kernel the CPU cannot run is
// skipped with the reason; all of them run on one machine whatever
// DSCORE_CPU_ISA says (that knob only lowers the plugin's choice).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "adam_cpu.h"

namespace dscore::adam {
namespace {

// Empty, shorter than one vector, one AVX-512 vector +- 1, odd sizes over
// many vectors, and more than one 32768-element chunk.
const std::vector<int64_t> kSizes = {0, 1, 7, 15, 16, 17, 1031, 4097, (1 << 17) + 3};

struct Buffers {
  std::vector<float> param, exp_avg, exp_avg_sq;
  std::vector<unsigned char> grad, out16;
  AdamTensor view(dscore_dtype grad_dtype, dscore_dtype out16_dtype) {
    return AdamTensor{param.data(),
                      grad.data(),
                      exp_avg.data(),
                      exp_avg_sq.data(),
                      out16_dtype == DSCORE_DTYPE_INVALID ? nullptr : out16.data(),
                      static_cast<int64_t>(param.size()),
                      grad_dtype,
                      out16_dtype};
  }
};

// Random parameters, a moment history, and gradients spanning magnitudes
// (tiny, ordinary, huge for fp16's range) written in the gradient dtype.
Buffers random_buffers(int64_t n, dscore_dtype grad_dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Buffers b;
  b.param.resize(n);
  b.exp_avg.resize(n);
  b.exp_avg_sq.resize(n);
  b.grad.resize(static_cast<size_t>(n) * sdk::dtype_size(grad_dtype));
  b.out16.assign(static_cast<size_t>(n) * 4, 0);
  const float scales[] = {1e-6f, 1e-2f, 1.0f, 300.0f};
  for (int64_t i = 0; i < n; ++i) {
    b.param[i] = normal(rng);
    b.exp_avg[i] = 0.1f * normal(rng);
    b.exp_avg_sq[i] = 0.01f * std::abs(normal(rng));
    const float g = normal(rng) * scales[i % 4];
    dscore_tensor t{};
    t.dtype = grad_dtype;
    t.data = b.grad.data();
    sdk::store_float(&t, i, g);
  }
  return b;
}

AdamConstants constants(bool adamw, double step, bool weight_decay = true,
                        bool bias_correction = true) {
  AdamConstants k{};
  k.lr = 1e-3f;
  k.beta1 = 0.9f;
  k.beta2 = 0.999f;
  k.eps = 1e-8f;
  k.weight_decay = weight_decay ? 0.01f : 0.0f;
  k.bias_correction1 = bias_correction ? static_cast<float>(1.0 - std::pow(0.9, step)) : 1.0f;
  k.bias_correction2 = bias_correction ? static_cast<float>(1.0 - std::pow(0.999, step)) : 1.0f;
  k.grad_scale = 0.75f;
  k.adamw = adamw;
  return k;
}

// Why this CPU cannot run `isa`'s kernel; empty where it can.
std::string cannot_run(Isa isa) {
  if (cpu_isa() >= isa) return "";
  return std::string("this CPU lacks ") + (isa == Isa::kAvx512 ? "AVX-512F" : "AVX2, FMA or F16C") +
         ": the " + isa_name(isa) +
         " kernel cannot run here (the narrower kernels are still compared)";
}
#define SKIP_UNLESS_CPU_RUNS(isa) \
  if (const std::string why = cannot_run(isa); !why.empty()) GTEST_SKIP() << why

template <typename T>
void expect_bitwise_equal(const std::vector<T>& a, const std::vector<T>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  size_t first = a.size();
  size_t mismatches = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      if (first == a.size()) first = i;
      ++mismatches;
    }
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " elements differ, first at " << first;
}

// Three steps of `a`'s kernel and of `b`'s on the same inputs, for every
// size, dtype pair and mode: bitwise equal results.
void expect_kernels_agree(Isa a_isa, Isa b_isa) {
  const dscore_dtype grad_dtypes[] = {DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16};
  const dscore_dtype out_dtypes[] = {DSCORE_DTYPE_INVALID, DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16,
                                     DSCORE_DTYPE_F16};
  for (int64_t n : kSizes)
    for (dscore_dtype g : grad_dtypes)
      for (dscore_dtype o : out_dtypes)
        for (bool adamw : {true, false})
          for (bool decay : {true, false})
            for (bool bias_correction : {true, false}) {
              SCOPED_TRACE(std::string(isa_name(a_isa)) + " vs " + isa_name(b_isa) +
                           " n=" + std::to_string(n) + " grad=" + sdk::dtype_name(g) +
                           " out16=" + sdk::dtype_name(o) + (adamw ? " adamw" : " L2") +
                           (decay ? " decay" : " no-decay") +
                           (bias_correction ? " bias-correction" : " no-bias-correction"));
              Buffers a = random_buffers(n, g, static_cast<uint32_t>(n) + g * 7 + o);
              Buffers b = a;
              for (int step = 1; step <= 3; ++step) {
                const AdamConstants k = constants(adamw, step, decay, bias_correction);
                AdamTensor ta = a.view(g, o), tb = b.view(g, o);
                adam_step_cpu(k, &ta, 1, a_isa);
                adam_step_cpu(k, &tb, 1, b_isa);
              }
              expect_bitwise_equal(a.param, b.param, "param");
              expect_bitwise_equal(a.exp_avg, b.exp_avg, "exp_avg");
              expect_bitwise_equal(a.exp_avg_sq, b.exp_avg_sq, "exp_avg_sq");
              expect_bitwise_equal(a.out16, b.out16, "params_16bit");
              if (::testing::Test::HasFailure()) return;  // one case's report, not hundreds
            }
}

TEST(AdamSimd, Avx2EqualsReferenceBitwise) {
  SKIP_UNLESS_CPU_RUNS(Isa::kAvx2);
  expect_kernels_agree(Isa::kAvx2, Isa::kScalar);
}

TEST(AdamSimd, Avx512EqualsReferenceBitwise) {
  SKIP_UNLESS_CPU_RUNS(Isa::kAvx512);
  expect_kernels_agree(Isa::kAvx512, Isa::kScalar);
}

TEST(AdamSimd, Avx512EqualsAvx2Bitwise) {
  SKIP_UNLESS_CPU_RUNS(Isa::kAvx512);
  expect_kernels_agree(Isa::kAvx512, Isa::kAvx2);
}

// The 16-bit copy of every special value (signed zeros, subnormals, the
// largest finite values, infinities, NaN, NaNs whose payload the hardware's
// conversion would keep) as the reference converts it, each value in a
// vector lane of every kernel (48 = 3 AVX-512 vectors).
void expect_special_copies_match(Isa isa) {
  const float nan_all_ones = std::bit_cast<float>(0x7fffffffu);
  const float nan_negative_payload = std::bit_cast<float>(0xffa00000u);
  const float nan_low_payload = std::bit_cast<float>(0x7fc01234u);
  const float specials[] = {0.0f,           -0.0f,     1e-45f,       -1e-40f,
                            6.0e-8f,        2.9e-8f,   65504.0f,     65519.0f,
                            65520.0f,       -70000.0f, 3.0e38f,      INFINITY,
                            -INFINITY,      NAN,       -NAN,         1.00390625f,
                            1.01171875f,    5.96e-8f,  nan_all_ones, nan_negative_payload,
                            nan_low_payload};
  const int64_t n = 16 * 3;
  for (dscore_dtype o : {DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16}) {
    SCOPED_TRACE(std::string(isa_name(isa)) + " " + sdk::dtype_name(o));
    Buffers ref = random_buffers(n, DSCORE_DTYPE_F32, 5);
    // lr 0 and zero gradients keep the parameters as written.
    for (int64_t i = 0; i < n; ++i) ref.param[i] = specials[i % std::size(specials)];
    std::memset(ref.grad.data(), 0, ref.grad.size());
    Buffers simd = ref;
    AdamConstants k = constants(true, 1);
    k.lr = 0.0f;
    k.weight_decay = 0.0f;
    AdamTensor a = ref.view(DSCORE_DTYPE_F32, o), b = simd.view(DSCORE_DTYPE_F32, o);
    adam_step_cpu(k, &a, 1, Isa::kScalar);
    adam_step_cpu(k, &b, 1, isa);
    expect_bitwise_equal(ref.out16, simd.out16, "params_16bit");
  }
}

TEST(AdamSimd, SixteenBitCopiesOfSpecialValuesMatchAvx2) {
  SKIP_UNLESS_CPU_RUNS(Isa::kAvx2);
  expect_special_copies_match(Isa::kAvx2);
}

TEST(AdamSimd, SixteenBitCopiesOfSpecialValuesMatchAvx512) {
  SKIP_UNLESS_CPU_RUNS(Isa::kAvx512);
  expect_special_copies_match(Isa::kAvx512);
}

// DSCORE_CPU_ISA lowers the choice and never raises it; anything else is
// ignored.
TEST(AdamSimd, CpuIsaKnobOnlyLowers) {
  EXPECT_EQ(lowered_isa(Isa::kAvx512, nullptr), Isa::kAvx512);
  EXPECT_EQ(lowered_isa(Isa::kAvx512, "avx512"), Isa::kAvx512);
  EXPECT_EQ(lowered_isa(Isa::kAvx512, "avx2"), Isa::kAvx2);
  EXPECT_EQ(lowered_isa(Isa::kAvx512, "scalar"), Isa::kScalar);
  EXPECT_EQ(lowered_isa(Isa::kAvx2, "avx512"), Isa::kAvx2);
  EXPECT_EQ(lowered_isa(Isa::kScalar, "avx2"), Isa::kScalar);
  EXPECT_EQ(lowered_isa(Isa::kAvx2, "sse9"), Isa::kAvx2);
  EXPECT_LE(best_isa(), cpu_isa());
  std::printf("adam kernel on this CPU: %s (plugin's choice: %s)\n", isa_name(cpu_isa()),
              isa_name(best_isa()));
}

// Many tensors of mixed dtypes through the parallel driver equal each
// tensor updated alone by the reference loop.
TEST(AdamSimd, MultiTensorParallelStepEqualsPerTensorReference) {
  const int64_t sizes[] = {1, 32768, 32769, 100003, 7, 65536 * 3 + 5};
  const dscore_dtype grads[] = {DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16,
                                DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16};
  const dscore_dtype outs[] = {DSCORE_DTYPE_BF16, DSCORE_DTYPE_INVALID, DSCORE_DTYPE_F16,
                               DSCORE_DTYPE_F32,  DSCORE_DTYPE_BF16,    DSCORE_DTYPE_INVALID};
  std::vector<Buffers> ref, fast;
  for (size_t i = 0; i < std::size(sizes); ++i)
    ref.push_back(random_buffers(sizes[i], grads[i], 11 + i));
  fast = ref;
  std::vector<AdamTensor> views;
  for (size_t i = 0; i < fast.size(); ++i) views.push_back(fast[i].view(grads[i], outs[i]));
  const AdamConstants k = constants(false, 4);
  adam_step_cpu(k, views.data(), views.size(), best_isa());
  for (size_t i = 0; i < ref.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i));
    AdamTensor a = ref[i].view(grads[i], outs[i]);
    adam_step_cpu(k, &a, 1, Isa::kScalar);
    expect_bitwise_equal(ref[i].param, fast[i].param, "param");
    expect_bitwise_equal(ref[i].exp_avg, fast[i].exp_avg, "exp_avg");
    expect_bitwise_equal(ref[i].exp_avg_sq, fast[i].exp_avg_sq, "exp_avg_sq");
    expect_bitwise_equal(ref[i].out16, fast[i].out16, "params_16bit");
  }
}

}  // namespace
}  // namespace dscore::adam
