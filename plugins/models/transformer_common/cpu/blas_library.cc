#include "blas_library.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <dscore/cpp/plugin.hpp>
#include "vector_math.h"

namespace dscore::transformer::cpu {
namespace {

#ifdef DSCORE_WITH_ONEDNN
constexpr bool kHaveOneDnn = true;
#else
constexpr bool kHaveOneDnn = false;
#endif

// Set beside OPENBLAS_CORETYPE when dscore chose it, so processes started
// from this one (which inherit both) tell that choice from a user's.
constexpr const char* kChosenVariable = "DSCORE_OPENBLAS_CORETYPE_FROM_FLAGS";

// The soname first (the runtime package), then the library the build linked against.
constexpr const char* kCandidates[] = {"libopenblas.so.0", DSCORE_OPENBLAS_PATH};

void* already_loaded() {
  for (const char* name : kCandidates)
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) return handle;
  return nullptr;
}

void* open_library(std::string* tried) {
  for (const char* name : kCandidates) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
    *tried += std::string(tried->empty() ? "" : "; ") + dlerror();
  }
  return nullptr;
}

template <typename F>
F symbol(void* handle, const char* name, std::string* missing) {
  void* found = dlsym(handle, name);
  if (found == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return reinterpret_cast<F>(found);
}

struct Loaded {
  BlasLibrary library;
  std::string error;
};

Loaded load() {
  Loaded out;
  BlasLibrary& lib = out.library;
  lib.flags = CpuFlags::of_this_cpu();
  lib.wanted = tier_of_flags(lib.flags, vector_isa());
  const char* user_core = std::getenv("OPENBLAS_CORETYPE");
  // A core dscore chose is not one a user set: a parent process's (dscore
  // run under mpirun, a bench starting ranks), or another copy of these
  // kernels in this process (a bench's beside a plugin's) that loaded
  // OpenBLAS after choosing.
  const char* chosen_above = std::getenv(kChosenVariable);
  const bool chosen_by_dscore =
      user_core != nullptr && chosen_above != nullptr && std::strcmp(user_core, chosen_above) == 0;
  void* handle = already_loaded();
  lib.choice = choose_openblas_core(lib.flags, lib.wanted, chosen_by_dscore ? nullptr : user_core,
                                    handle != nullptr && !chosen_by_dscore);
  // Before the library's constructor runs (dlopen below), which reads it.
  if (!lib.choice.set_core.empty()) {
    setenv("OPENBLAS_CORETYPE", lib.choice.set_core.c_str(), 1);
    setenv(kChosenVariable, lib.choice.set_core.c_str(), 1);
  }
  std::string tried;
  if (handle == nullptr) handle = open_library(&tried);
  if (handle == nullptr) {
    out.error = "cannot load OpenBLAS, which runs the CPU models' fp32 products (" + tried +
                "): install it (Debian: apt-get install libopenblas0)";
    return out;
  }
  std::string missing;
  lib.sgemm = symbol<decltype(lib.sgemm)>(handle, "cblas_sgemm", &missing);
  lib.dgemm = symbol<decltype(lib.dgemm)>(handle, "cblas_dgemm", &missing);
  lib.set_threads = symbol<void (*)(int)>(handle, "openblas_set_num_threads", &missing);
  auto corename = symbol<char* (*)()>(handle, "openblas_get_corename", &missing);
  auto config = symbol<char* (*)()>(handle, "openblas_get_config", &missing);
  if (!missing.empty()) {
    out.error = "the OpenBLAS loaded lacks " + missing + ": install Debian's libopenblas0";
    return out;
  }
  lib.set_threads(1);
  lib.core = corename();
  lib.config = config();
  lib.route = choose_fp32_route(lib.core, lib.wanted, lib.choice.user_set, kHaveOneDnn);
  if (const char* asked = std::getenv("DSCORE_FP32_GEMM"); asked != nullptr && *asked != '\0') {
    const std::string name(asked);
    lib.route_asked = true;
    if (name == "openblas") {
      lib.route = {Fp32Backend::kOpenBlas, ""};
    } else if (name == "onednn" && kHaveOneDnn) {
      lib.route = {Fp32Backend::kOneDnn, ""};
    } else {
      out.error = "DSCORE_FP32_GEMM=" + name + " is not a library of this build's fp32 products: " +
                  (kHaveOneDnn ? "openblas or onednn" : "openblas (this build has no oneDNN)");
    }
  }
  return out;
}

std::atomic<int> g_backend_override{-1};
std::atomic<bool> g_loaded{false};

const Loaded& loaded() {
  static const Loaded result = [] {
    Loaded r = load();
    g_loaded.store(true);
    if (r.error.empty()) {
      std::fprintf(stderr, "[dscore] fp32 GEMM: %s\n", r.library.describe().c_str());
      if (!r.library.route.warning.empty())
        std::fprintf(stderr, "[dscore] warning: %s\n", r.library.route.warning.c_str());
    }
    return r;
  }();
  return result;
}

}  // namespace

std::string BlasLibrary::describe() const {
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the name and version.
  const size_t second_space = config.find(' ', config.find(' ') + 1);
  std::string text = config.substr(0, second_space) + ", core " + core + ": " + choice.reason +
                     "; fp32 products on ";
  text += route.backend == Fp32Backend::kOneDnn ? "oneDNN's sgemm" : "OpenBLAS";
  return route_asked ? text + " (DSCORE_FP32_GEMM)" : text;
}

bool blas_library_loaded() { return g_loaded.load(); }

const BlasLibrary& blas_library() {
  const Loaded& result = loaded();
  if (!result.error.empty()) throw sdk::Error(DSCORE_NOT_FOUND, result.error);
  return result.library;
}

Fp32Backend fp32_backend() {
  const int forced = g_backend_override.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Fp32Backend>(forced) : blas_library().route.backend;
}

void set_reported_core_for_testing(const char* core) {
  if (core == nullptr) {
    g_backend_override.store(-1);
    return;
  }
  const BlasLibrary& lib = blas_library();
  const Fp32Route route = choose_fp32_route(core, lib.wanted, false, kHaveOneDnn);
  g_backend_override.store(static_cast<int>(route.backend));
}

void set_fp32_backend_for_testing(const Fp32Backend* backend) {
  g_backend_override.store(backend == nullptr ? -1 : static_cast<int>(*backend));
}

}  // namespace dscore::transformer::cpu
