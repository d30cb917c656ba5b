#include "cpu_gemm_rate.h"

#include <sched.h>

#include <oneapi/tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "transformer_common/cpu/amx_gemm.h"
#include "transformer_common/cpu/blas_library.h"
#include "transformer_common/cpu/gemm.h"
#include "transformer_common/cpu/gemm_bf16.h"

namespace dscore::bench {
namespace {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

template <typename Fn>
double best_gflops(int64_t n, int repeats, Fn&& multiply) {
  multiply();  // warm-up: page faults, OpenBLAS's thread start
  double best = 0;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    multiply();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(n) * n * n / s / 1e9);
  }
  return best;
}

}  // namespace

CpuGemmRate measure_cpu_gemm_rate(int64_t n, int repeats, int threads) {
  CpuGemmRate rate;
  rate.n = n;
  rate.threads = threads > 0 ? threads : usable_cpus();
  rate.cpu_has_bf16 = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  std::vector<float> a(static_cast<size_t>(n * n)), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 17) * 0.03f - 0.2f;
    b[i] = static_cast<float>(i % 13) * 0.05f - 0.3f;
  }
  const int blas_n = static_cast<int>(n);
  const transformer::cpu::BlasLibrary& blas = transformer::cpu::blas_library();
  rate.openblas_core = blas.core;
  blas.set_threads(rate.threads);
  rate.openblas_gflops = best_gflops(n, repeats, [&] {
    blas.sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_n, blas_n, blas_n, 1.0f, a.data(),
               blas_n, b.data(), blas_n, 0.0f, c.data(), blas_n);
  });
  blas.set_threads(1);
  {
    tbb::global_control cores(tbb::global_control::max_allowed_parallelism,
                              static_cast<size_t>(rate.threads));
    rate.blocked_gflops = best_gflops(n, repeats, [&] {
      transformer::cpu::gemm<float>(transformer::cpu::Op::kNone, transformer::cpu::Op::kTranspose,
                                    n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    });
  }
  rate.bf16_absent = transformer::cpu::bf16_gemm_unavailable_reason();
  if (rate.bf16_absent.empty()) {
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    transformer::cpu::round_to_bf16(a16.data(), a.data(), static_cast<int64_t>(a.size()));
    transformer::cpu::round_to_bf16(b16.data(), b.data(), static_cast<int64_t>(b.size()));
    tbb::global_control cores(tbb::global_control::max_allowed_parallelism,
                              static_cast<size_t>(rate.threads));
    // The shape the linear layers' forward multiplies: B transposed.
    const auto bf16_rate = [&] {
      return best_gflops(n, repeats, [&] {
        transformer::cpu::gemm_bf16(transformer::cpu::Op::kNone, transformer::cpu::Op::kTranspose,
                                    n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(), n);
      });
    };
    rate.bf16_gflops = bf16_rate();
    if (transformer::cpu::amx_gemm_available()) {
      rate.bf16_how = "AMX tiles, the gpt plugin's chunks";
      // oneDNN's beside it, as DSCORE_BF16_GEMM=onednn runs.
      transformer::cpu::set_amx_gemm_declined(true);
      rate.bf16_onednn_gflops = bf16_rate();
      transformer::cpu::set_amx_gemm_declined(false);
    } else {
      rate.bf16_how = "oneDNN, the gpt plugin's blocks";
    }
  }
  const bool blocked_wins = rate.blocked_gflops > rate.openblas_gflops;
  rate.fp32_gflops = std::max(rate.blocked_gflops, rate.openblas_gflops);
  rate.fp32_how = blocked_wins ? "the gpt plugin's blocks over TBB" : "one OpenBLAS call";
  return rate;
}

std::string describe(const CpuGemmRate& rate) {
  char bf16[300];
  if (rate.bf16_absent.empty()) {
    const int at = std::snprintf(bf16, sizeof bf16, "%.1f GFLOP/s (%s", rate.bf16_gflops,
                                 rate.bf16_how.c_str());
    if (rate.bf16_onednn_gflops > 0) {
      std::snprintf(bf16 + at, sizeof bf16 - at, "; oneDNN's blocks %.1f)",
                    rate.bf16_onednn_gflops);
    } else {
      std::snprintf(bf16 + at, sizeof bf16 - at, ")");
    }
  } else {
    std::snprintf(bf16, sizeof bf16, "none (%s)", rate.bf16_absent.c_str());
  }
  char text[700];
  std::snprintf(text, sizeof text,
                "limit measured now: fp32 GEMM %.1f GFLOP/s on %d cores (n = %lld; one OpenBLAS "
                "call on its %s core %.1f, the gpt plugin's blocks %.1f); bf16 GEMM: %s",
                rate.fp32_gflops, rate.threads, static_cast<long long>(rate.n),
                rate.openblas_core.c_str(), rate.openblas_gflops, rate.blocked_gflops, bf16);
  return text;
}

}  // namespace dscore::bench
