// The vector ISA a plugin's CPU kernels run on: what the CPU has, lowered
// by the environment variable DSCORE_CPU_ISA=avx512|avx2|scalar so tests and
// benches can compare the paths on one machine. Each plugin detects what
// its own kernels need (the adam kernels F16C, the transformer kernels FMA)
// and lowers that here, so one variable steers every plugin the same way.
#pragma once

#include <algorithm>
#include <cstdio>
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

}  // namespace dscore::sdk
