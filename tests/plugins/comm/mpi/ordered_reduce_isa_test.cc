// The mpi backend's reductions on each vector ISA this CPU has give the
// bits of the sdk's reduce_chunks on the baseline ISA: fp32, bf16 and fp16,
// every op, world sizes 2-4, lengths across reduce_chunks' tiles.
#include "ordered_reduce_isa.h"

#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/ordered_reduce.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace dscore::mpi_comm {
namespace {

// world x n values of `dtype` (2 or 4 bytes each), normal with a few
// infinities and NaNs among them.
std::vector<unsigned char> chunks_of(dscore_dtype dtype, int world, int64_t n) {
  std::mt19937 rng(static_cast<uint32_t>(world * 131 + n));
  std::normal_distribution<float> normal(0.0f, 30.0f);
  const size_t es = sdk::dtype_size(dtype);
  std::vector<unsigned char> bytes(static_cast<size_t>(world * n) * es);
  for (size_t i = 0; i < static_cast<size_t>(world * n); ++i) {
    float v = normal(rng);
    if (i % 997 == 5) v = INFINITY;
    if (i % 1999 == 7) v = NAN;
    if (dtype == DSCORE_DTYPE_F32) {
      std::memcpy(&bytes[i * es], &v, es);
    } else {
      const uint16_t h = dtype == DSCORE_DTYPE_BF16 ? sdk::float_to_bf16(v) : sdk::float_to_half(v);
      std::memcpy(&bytes[i * es], &h, es);
    }
  }
  return bytes;
}

TEST(MpiOrderedReduceIsa, EveryIsaGivesTheBaselineBits) {
  for (sdk::CpuIsa isa : {sdk::CpuIsa::kScalar, sdk::CpuIsa::kAvx2, sdk::CpuIsa::kAvx512}) {
    if (isa > reduce_isa()) continue;  // not on this CPU
    for (dscore_dtype dtype : {DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16})
      for (dscore_reduce_op op : {DSCORE_REDUCE_SUM, DSCORE_REDUCE_AVG, DSCORE_REDUCE_PRODUCT,
                                  DSCORE_REDUCE_MIN, DSCORE_REDUCE_MAX})
        for (int world : {2, 3, 4})
          for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{5000}}) {
            const std::vector<unsigned char> in = chunks_of(dtype, world, n);
            const size_t bytes = static_cast<size_t>(n) * sdk::dtype_size(dtype);
            std::vector<unsigned char> want(bytes), got(bytes);
            std::vector<double> scratch_a, scratch_b;
            sdk::reduce_chunks(in.data(), world, n, dtype, op, want.data(), &scratch_a);
            reduce_chunks_on(isa, in.data(), world, n, dtype, op, got.data(), &scratch_b);
            ASSERT_EQ(got, want) << sdk::cpu_isa_name(isa) << ", dtype " << dtype << ", op " << op
                                 << ", world " << world << ", n " << n;
          }
  }
}

TEST(MpiOrderedReduceIsa, TakesTheWidestIsaHere) {
  if (std::getenv("DSCORE_CPU_ISA") != nullptr) GTEST_SKIP() << "DSCORE_CPU_ISA is set";
  const sdk::CpuIsa widest = __builtin_cpu_supports("avx512f") ? sdk::CpuIsa::kAvx512
                             : __builtin_cpu_supports("avx2")  ? sdk::CpuIsa::kAvx2
                                                               : sdk::CpuIsa::kScalar;
  EXPECT_EQ(reduce_isa(), widest);
}

}  // namespace
}  // namespace dscore::mpi_comm
