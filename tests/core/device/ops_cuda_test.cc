// core/device/ops.h on CUDA against the CPU target on the same data: the
// elementwise ops byte for byte (conversions over every 16-bit pattern and
// random fp32 bit patterns, NaN payloads included), the sum of squares
// within the bound ops.h states (one double ulp) and deterministic.
// Label `gpu`: skipped (GTEST_SKIP) where no CUDA device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/device/ops.h"

namespace dscore::device::ops {
namespace {

#define CUDA_OK(call)                                                          \
  do {                                                                         \
    const cudaError_t err_ = (call);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #call << ": " << cudaGetErrorString(err_); \
  } while (0)

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

constexpr dscore_dtype kFloats[] = {DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16};

// Device memory holding a copy of host bytes.
class DeviceBytes {
 public:
  explicit DeviceBytes(const std::vector<char>& host) : bytes_(host.size()) {
    EXPECT_EQ(cudaMalloc(&data_, bytes_ + 1), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* get() const { return data_; }
  std::vector<char> download() const {
    std::vector<char> out(bytes_);
    EXPECT_EQ(cudaMemcpy(out.data(), data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

class DeviceOpsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Target cuda() const { return Target::cuda(stream_); }
  void sync() { ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess); }
  cudaStream_t stream_ = nullptr;
};

// Random bit patterns: every class of value (NaN with payloads, infinities,
// subnormals, zeros of both signs) appears in a few thousand elements.
std::vector<char> random_bits(dscore_dtype dtype, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> out(static_cast<size_t>(n) * sdk::dtype_size(dtype));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(rng());
  return out;
}

// Finite values of every magnitude the dtype holds (and, every 97th, +Inf
// in `a` only, so no arithmetic makes a NaN whose payload is the
// hardware's: ops.h).
std::vector<char> random_values(dscore_dtype dtype, int64_t n, uint32_t seed, bool with_inf) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // fp16: magnitudes from its subnormals up to 2^12, none that overflow
  // (an overflow would make infinities of both signs, and Inf - Inf a NaN).
  std::uniform_int_distribution<int> exponent(dtype == DSCORE_DTYPE_F16 ? -26 : -30,
                                              dtype == DSCORE_DTYPE_F16 ? 10 : 15);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = std::ldexp(normal(rng), exponent(rng));
    if (with_inf && i % 97 == 5) v[static_cast<size_t>(i)] = std::numeric_limits<float>::infinity();
  }
  std::vector<char> out(static_cast<size_t>(n) * sdk::dtype_size(dtype));
  convert(Target::cpu(), v.data(), DSCORE_DTYPE_F32, out.data(), dtype, n);
  return out;
}

TEST_F(DeviceOpsCuda, ConvertEqualsTheCpuOnEveryPattern) {
  // Every 16-bit pattern; 2^22 random fp32 patterns.
  for (dscore_dtype from : kFloats)
    for (dscore_dtype to : kFloats) {
      SCOPED_TRACE(std::string(sdk::dtype_name(from)) + " -> " + sdk::dtype_name(to));
      std::vector<char> src;
      int64_t n;
      if (from == DSCORE_DTYPE_F32) {
        n = int64_t{1} << 22;
        src = random_bits(from, n, 11);
      } else {
        n = 65536;
        src.resize(2 * 65536);
        for (uint32_t i = 0; i < 65536; ++i) {
          const uint16_t h = static_cast<uint16_t>(i);
          std::memcpy(src.data() + 2 * i, &h, 2);
        }
      }
      std::vector<char> expected(static_cast<size_t>(n) * sdk::dtype_size(to));
      convert(Target::cpu(), src.data(), from, expected.data(), to, n);
      DeviceBytes d_src(src), d_dst(std::vector<char>(expected.size(), 0x5a));
      convert(cuda(), d_src.get(), from, d_dst.get(), to, n);
      sync();
      EXPECT_TRUE(d_dst.download() == expected);
    }
}

TEST_F(DeviceOpsCuda, ScaleAccumulateFillAndCopyEqualTheCpuBitForBit) {
  // accumulate_into: every pair of dtypes.
  const int64_t n = (int64_t{1} << 20) + 13;  // a grid-stride remainder too
  for (dscore_dtype d : kFloats) {
    SCOPED_TRACE(sdk::dtype_name(d));
    const std::vector<char> a = random_values(d, n, 21, true);
    const std::vector<char> b = random_values(d, n, 22, false);
    // Factors as the engine uses them: 1/world, 1/(loss scale * clip), and
    // one that overflows fp16.
    for (double factor : {0.5, 1.0 / 3.0, 1.0 / 65536.0 / 1.7, 1e3}) {
      std::vector<char> expected = a;
      scale_in_place(Target::cpu(), expected.data(), d, n, factor);
      DeviceBytes x(a);
      scale_in_place(cuda(), x.get(), d, n, factor);
      sync();
      EXPECT_TRUE(x.download() == expected) << "scale_in_place by " << factor;
    }
    std::vector<char> expected = a;
    accumulate(Target::cpu(), expected.data(), b.data(), d, n);
    DeviceBytes x(a), y(b);
    accumulate(cuda(), x.get(), y.get(), d, n);
    sync();
    EXPECT_TRUE(x.download() == expected) << "accumulate";
    for (dscore_dtype s : kFloats) {
      const std::vector<char> c = random_values(s, n, 23, false);
      std::vector<char> want = a;
      accumulate_into(Target::cpu(), want.data(), d, c.data(), s, n);
      DeviceBytes into(a), from(c);
      accumulate_into(cuda(), into.get(), d, from.get(), s, n);
      sync();
      EXPECT_TRUE(into.download() == want) << "accumulate_into from " << sdk::dtype_name(s);
    }
    copy(cuda(), x.get(), y.get(), d, n);
    sync();
    EXPECT_TRUE(x.download() == b) << "copy";
    fill_zero(cuda(), x.get(), d, n - 1);
    sync();
    std::vector<char> zeros = b;
    fill_zero(Target::cpu(), zeros.data(), d, n - 1);
    EXPECT_TRUE(x.download() == zeros) << "fill_zero of all but the last element";
  }
}

// The CUDA sum of squares and the CPU's, and two CUDA runs.
void expect_close_and_deterministic(Target target, const std::vector<char>& host, dscore_dtype d,
                                    int64_t n, cudaStream_t stream) {
  SquareSumResult cpu;
  sum_squares(Target::cpu(), host.data(), d, n, &cpu, nullptr);
  DeviceBytes data(host);
  std::vector<char> workspace_init(sum_squares_workspace_bytes(Backend::kCuda), 0);
  DeviceBytes workspace(workspace_init);
  DeviceBytes out(std::vector<char>(2 * sizeof(SquareSumResult), 0x7f));
  auto* results = static_cast<SquareSumResult*>(out.get());
  sum_squares(target, data.get(), d, n, results, workspace.get());
  sum_squares(target, data.get(), d, n, results + 1, workspace.get());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<char> bytes = out.download();
  SquareSumResult gpu[2];
  std::memcpy(gpu, bytes.data(), sizeof gpu);
  EXPECT_EQ(std::memcmp(&gpu[0], &gpu[1], sizeof gpu[0]), 0) << "two runs differ";
  EXPECT_EQ(gpu[0].non_finite, cpu.non_finite);
  EXPECT_EQ(gpu[0].reserved, 0);
  if (cpu.non_finite) return;
  const double want = to_square_sum(cpu).value();
  const double got = to_square_sum(gpu[0]).value();
  // ops.h: at most one double ulp apart (2^-52 relative).
  EXPECT_LE(std::fabs(got - want), std::ldexp(want, -52))
      << "n " << n << ": cuda " << got << " cpu " << want;
}

TEST_F(DeviceOpsCuda, SumSquaresIsWithinOneDoubleUlpOfTheCpuAndDeterministic) {
  for (dscore_dtype d : kFloats)
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{16385}, (int64_t{1} << 22) + 3,
                      int64_t{40} * (1 << 20) + 1}) {
      SCOPED_TRACE(std::string(sdk::dtype_name(d)) + " n " + std::to_string(n));
      expect_close_and_deterministic(cuda(), random_values(d, n, 31, false), d, n, stream_);
    }
}

TEST_F(DeviceOpsCuda, SumSquaresSeesInfAndNanAnywhere) {
  const int64_t n = (int64_t{1} << 21) + 5;
  for (dscore_dtype d : kFloats)
    for (float bad :
         {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
      for (int64_t at : {int64_t{0}, n / 2 + 1, n - 1}) {
        SCOPED_TRACE(std::string(sdk::dtype_name(d)) + " at " + std::to_string(at));
        std::vector<char> host = random_values(d, n, 41, false);
        convert(Target::cpu(), &bad, DSCORE_DTYPE_F32, host.data() + at * sdk::dtype_size(d), d, 1);
        expect_close_and_deterministic(cuda(), host, d, n, stream_);
      }
}

TEST_F(DeviceOpsCuda, FinishedSumsCanBeReadWithoutADeviceWideSync) {
  // The engine's pattern: enqueue the statistics, record an event, copy the
  // 24 bytes back on the same stream and wait for that stream only.
  const int64_t n = 1 << 20;
  const std::vector<char> host = random_values(DSCORE_DTYPE_BF16, n, 51, false);
  DeviceBytes data(host);
  DeviceBytes workspace(std::vector<char>(sum_squares_workspace_bytes(Backend::kCuda), 0));
  DeviceBytes out(std::vector<char>(sizeof(SquareSumResult), 0));
  sum_squares(cuda(), data.get(), DSCORE_DTYPE_BF16, n, static_cast<SquareSumResult*>(out.get()),
              workspace.get());
  SquareSumResult* pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, sizeof *pinned));
  CUDA_OK(cudaMemcpyAsync(pinned, out.get(), sizeof *pinned, cudaMemcpyDeviceToHost, stream_));
  CUDA_OK(cudaStreamSynchronize(stream_));
  SquareSumResult cpu;
  sum_squares(Target::cpu(), host.data(), DSCORE_DTYPE_BF16, n, &cpu, nullptr);
  EXPECT_LE(std::fabs(to_square_sum(*pinned).value() - to_square_sum(cpu).value()),
            std::ldexp(to_square_sum(cpu).value(), -52));
  cudaFreeHost(pinned);
}

}  // namespace
}  // namespace dscore::device::ops
