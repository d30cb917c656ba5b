// OpenBLAS, loaded at run time (dlopen) rather than linked, so that its core
// is set from the CPU's flags (openblas_core.h) before its constructor reads
// OPENBLAS_CORETYPE. Loaded once per process, by whichever model, kernel
// test or bench comes first; it runs single-threaded (TBB splits the work,
// see gemm.h) and logs its library, core and the route of the fp32
// products once, with a warning where the core is below the CPU's flags.
#pragma once

#include <cblas.h>

#include <string>

#include "openblas_core.h"

namespace dscore::transformer::cpu {

struct BlasLibrary {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  void (*set_threads)(int) = nullptr;  // the kernels keep it at 1; benches raise it
  std::string config;                  // openblas_get_config(): version and build
  std::string core;                    // openblas_get_corename(), as loaded
  CpuFlags flags;
  GemmTier wanted = GemmTier::kGeneric;  // what the flags (and DSCORE_CPU_ISA) allow
  CoreChoice choice;
  Fp32Route route;
  bool route_asked = false;  // DSCORE_FP32_GEMM chose it

  std::string describe() const;  // the line logged at start
};

// Loads OpenBLAS on the first call; throws sdk::Error (DSCORE_NOT_FOUND),
// naming the library and the package, where it cannot.
const BlasLibrary& blas_library();

// Whether blas_library() has run in this process (tests that set the
// environment first need to be the first to load it).
bool blas_library_loaded();

// Which library the fp32 products run on now.
Fp32Backend fp32_backend();

// Tests: route the fp32 products as if OpenBLAS had reported `core`
// (nullptr: back to what it reported).
void set_reported_core_for_testing(const char* core);
// Tests: the fp32 products on `backend` (nullptr: back to the route chosen).
void set_fp32_backend_for_testing(const Fp32Backend* backend);

}  // namespace dscore::transformer::cpu
