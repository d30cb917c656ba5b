// The vector ISA a plugin's CPU kernels run on: what the CPU has, lowered
// by the environment variable DSCORE_CPU_ISA=avx512|avx2|scalar so tests and
// benches can compare the paths on one machine. Each plugin detects what
// its own kernels need (the adam kernels F16C, the transformer kernels FMA)
// and lowers that here, so one variable steers every plugin the same way.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dscore::sdk {

// Ordered: a wider ISA compares greater.
enum class CpuIsa { kScalar, kAvx2, kAvx512 };

inline const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kScalar:
      break;
  }
  return "scalar";
}

// `available` lowered by `cap`, a DSCORE_CPU_ISA value (NULL: unchanged);
// never raised. An unknown value is reported on stderr, with `who` (the
// kernels reading it), and ignored.
inline CpuIsa lowered_cpu_isa(CpuIsa available, const char* cap, const char* who) {
  if (cap == nullptr) return available;
  CpuIsa limit = CpuIsa::kAvx512;
  if (std::strcmp(cap, "scalar") == 0) {
    limit = CpuIsa::kScalar;
  } else if (std::strcmp(cap, "avx2") == 0) {
    limit = CpuIsa::kAvx2;
  } else if (std::strcmp(cap, "avx512") != 0) {
    std::fprintf(stderr,
                 "[dscore] %s: DSCORE_CPU_ISA=%s is not one of avx512, avx2, scalar; ignored\n",
                 who, cap);
  }
  return std::min(limit, available);
}

// The widest of AVX-512 (avx512f), AVX2 and scalar this CPU has, lowered
// by DSCORE_CPU_ISA: for kernels that need no feature past those two
// (others detect their own and call lowered_cpu_isa). `who` as above.
inline CpuIsa detected_cpu_isa(const char* who) {
  CpuIsa available = CpuIsa::kScalar;
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx2")) available = CpuIsa::kAvx2;
  if (__builtin_cpu_supports("avx512f")) available = CpuIsa::kAvx512;
#endif
  return lowered_cpu_isa(available, std::getenv("DSCORE_CPU_ISA"), who);
}

}  // namespace dscore::sdk
