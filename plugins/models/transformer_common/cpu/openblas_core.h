// Which OpenBLAS kernel ("core") a CPU should run, decided from its feature
// flags rather than its model number. A DYNAMIC_ARCH OpenBLAS picks its
// core by model when it loads and falls to its generic Prescott kernel on a
// processor newer than its own table (Debian 12's 0.3.21 on a family 6
// model 207 Xeon: 62 GFLOP/s against 308 on its SkylakeX kernel), unless
// OPENBLAS_CORETYPE names one. These are the pure decisions; blas_library.h
// acts on them before OpenBLAS is loaded.
#pragma once

#include <string>
#include <string_view>

#include <dscore/cpp/cpu_isa.hpp>

namespace dscore::transformer::cpu {

// The vector width a GEMM kernel uses, ordered: a wider tier compares greater.
enum class GemmTier { kGeneric, kAvx2, kAvx512 };

const char* gemm_tier_name(GemmTier tier);

// The flags that decide the core.
struct CpuFlags {
  bool avx2_fma = false;     // avx2 and fma
  bool avx512 = false;       // avx512f, bw, vl and dq (SkylakeX's kernels)
  bool avx512_bf16 = false;  // Cooper Lake's
  bool amd = false;

  static CpuFlags of_this_cpu();
  std::string describe() const;  // "avx512 avx512_bf16, Intel"
};

// The widest tier the flags allow, lowered to `cap` (DSCORE_CPU_ISA through
// vector_isa(), so one variable steers every kernel).
GemmTier tier_of_flags(const CpuFlags& flags, sdk::CpuIsa cap);

// The tier an OpenBLAS core name runs at (case-insensitive): SkylakeX,
// Cooperlake, SapphireRapids avx512; Haswell, Zen avx2; any other older or
// generic core kGeneric.
GemmTier tier_of_openblas_core(std::string_view core);

// The OpenBLAS core for `tier` on a CPU with `flags`: Cooperlake or
// SkylakeX, Zen or Haswell; empty for kGeneric (OpenBLAS's own pick stands).
std::string openblas_core_for(const CpuFlags& flags, GemmTier tier);

// What to do before loading OpenBLAS.
struct CoreChoice {
  std::string set_core;   // the OPENBLAS_CORETYPE to set; empty: set nothing
  std::string reason;     // why, for the log
  bool user_set = false;  // the environment named a core (respected)
};

// `user_core`: OPENBLAS_CORETYPE as the environment has it (NULL: unset),
// which is respected. `already_loaded`: OpenBLAS was in the process before
// dscore could choose (a program that links it), too late to set anything.
CoreChoice choose_openblas_core(const CpuFlags& flags, GemmTier wanted, const char* user_core,
                                bool already_loaded);

// Which library runs the fp32 products, once OpenBLAS reports its core.
enum class Fp32Backend { kOpenBlas, kOneDnn };

struct Fp32Route {
  Fp32Backend backend = Fp32Backend::kOpenBlas;
  std::string warning;  // non-empty: said once at start
};

// Where the flags allow AVX-512 and this build has oneDNN, the products go
// to oneDNN's sgemm (which dispatches on the flags; faster than OpenBLAS's
// AVX-512 cores on the models' shapes). Otherwise OpenBLAS, unless its core
// runs below the tier the flags allow: then oneDNN's sgemm where this build
// has it. A core the user chose keeps the products on OpenBLAS (warned
// about where it is below the flags). DSCORE_FP32_GEMM=openblas|onednn
// overrides the choice (blas_library.cc).
Fp32Route choose_fp32_route(std::string_view reported_core, GemmTier wanted, bool user_set_core,
                            bool onednn_available);

}  // namespace dscore::transformer::cpu
