// The fp32 GEMM library's kernel is chosen from the CPU's flags
// (cpu/openblas_core.h, cpu/blas_library.h): the pure decisions for
// processors of every kind, the library as this process loaded it, and the
// products routed to oneDNN when OpenBLAS reports a core below the flags
// (through the test seam for the reported core) and on either library,
// against double products; DSCORE_FP32_GEMM's refusal of an unknown name.
#include <gtest/gtest.h>
#include <dscore/cpp/plugin.hpp>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "transformer_common/cpu/blas_library.h"
#include "transformer_common/cpu/gemm.h"

namespace dscore::transformer::cpu {
namespace {

CpuFlags flags(bool avx2, bool avx512, bool bf16, bool amd) {
  CpuFlags f;
  f.avx2_fma = avx2;
  f.avx512 = avx512;
  f.avx512_bf16 = bf16;
  f.amd = amd;
  return f;
}

TEST(OpenBlasCoreTest, CoreNamesHaveTheirTiers) {
  EXPECT_EQ(tier_of_openblas_core("Prescott"), GemmTier::kGeneric);
  EXPECT_EQ(tier_of_openblas_core("Sandybridge"), GemmTier::kGeneric);
  EXPECT_EQ(tier_of_openblas_core("Haswell"), GemmTier::kAvx2);
  EXPECT_EQ(tier_of_openblas_core("ZEN"), GemmTier::kAvx2);
  EXPECT_EQ(tier_of_openblas_core("SkylakeX"), GemmTier::kAvx512);
  EXPECT_EQ(tier_of_openblas_core("cooperlake"), GemmTier::kAvx512);
}

TEST(OpenBlasCoreTest, FlagsDecideTheTierAndDscoreCpuIsaLowersIt) {
  const CpuFlags xeon = flags(true, true, true, false);
  EXPECT_EQ(tier_of_flags(xeon, sdk::CpuIsa::kAvx512), GemmTier::kAvx512);
  EXPECT_EQ(tier_of_flags(xeon, sdk::CpuIsa::kAvx2), GemmTier::kAvx2);
  EXPECT_EQ(tier_of_flags(xeon, sdk::CpuIsa::kScalar), GemmTier::kGeneric);
  EXPECT_EQ(tier_of_flags(flags(true, false, false, true), sdk::CpuIsa::kAvx512), GemmTier::kAvx2);
  EXPECT_EQ(tier_of_flags(flags(false, false, false, false), sdk::CpuIsa::kAvx512),
            GemmTier::kGeneric);
}

TEST(OpenBlasCoreTest, AnUnsetCoreIsChosenFromTheFlags) {
  EXPECT_EQ(choose_openblas_core(flags(true, true, true, false), GemmTier::kAvx512, nullptr, false)
                .set_core,
            "Cooperlake");
  EXPECT_EQ(choose_openblas_core(flags(true, true, false, false), GemmTier::kAvx512, nullptr, false)
                .set_core,
            "SkylakeX");
  EXPECT_EQ(
      choose_openblas_core(flags(true, true, false, true), GemmTier::kAvx512, "", false).set_core,
      "SkylakeX");  // an empty value counts as unset
  EXPECT_EQ(choose_openblas_core(flags(true, false, false, true), GemmTier::kAvx2, nullptr, false)
                .set_core,
            "Zen");
  EXPECT_EQ(choose_openblas_core(flags(true, true, true, false), GemmTier::kAvx2, nullptr, false)
                .set_core,
            "Haswell");  // DSCORE_CPU_ISA=avx2
  const CoreChoice old =
      choose_openblas_core(flags(false, false, false, false), GemmTier::kGeneric, nullptr, false);
  EXPECT_EQ(old.set_core, "");  // OpenBLAS's own pick stands
  EXPECT_NE(old.reason.find("allow no wider core"), std::string::npos);
}

TEST(OpenBlasCoreTest, ACoreTheUserSetIsRespected) {
  const CoreChoice choice =
      choose_openblas_core(flags(true, true, true, false), GemmTier::kAvx512, "Prescott", false);
  EXPECT_EQ(choice.set_core, "");
  EXPECT_TRUE(choice.user_set);
  EXPECT_NE(choice.reason.find("OPENBLAS_CORETYPE=Prescott"), std::string::npos);
  const Fp32Route route = choose_fp32_route("Prescott", GemmTier::kAvx512, true, true);
  EXPECT_EQ(route.backend, Fp32Backend::kOpenBlas);
  EXPECT_NE(route.warning.find("as OPENBLAS_CORETYPE asks"), std::string::npos);
}

TEST(OpenBlasCoreTest, AGenericCoreSendsTheProductsToOneDnn) {
  const Fp32Route route = choose_fp32_route("Prescott", GemmTier::kAvx512, false, true);
  EXPECT_EQ(route.backend, Fp32Backend::kOneDnn);
  EXPECT_NE(route.warning.find("Prescott"), std::string::npos);
  const Fp32Route without = choose_fp32_route("Prescott", GemmTier::kAvx2, false, false);
  EXPECT_EQ(without.backend, Fp32Backend::kOpenBlas);
  EXPECT_NE(without.warning.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos);
  EXPECT_EQ(choose_fp32_route("Prescott", GemmTier::kGeneric, false, true).warning, "");
}

// A core that matches the flags: AVX-512 with oneDNN sends the products to
// its sgemm (faster on the models' shapes), unless the user set the core;
// AVX2, or a build without oneDNN, keeps them on OpenBLAS. No warning.
TEST(OpenBlasCoreTest, AMatchedCoreRoutesByTheFlags) {
  struct Case {
    const char* core;
    GemmTier wanted;
    bool user_set, onednn;
    Fp32Backend expected;
  };
  for (const Case& c : {Case{"Cooperlake", GemmTier::kAvx512, false, true, Fp32Backend::kOneDnn},
                        Case{"Cooperlake", GemmTier::kAvx512, false, false, Fp32Backend::kOpenBlas},
                        Case{"Haswell", GemmTier::kAvx2, false, true, Fp32Backend::kOpenBlas},
                        Case{"SkylakeX", GemmTier::kAvx512, true, true, Fp32Backend::kOpenBlas}}) {
    const Fp32Route route = choose_fp32_route(c.core, c.wanted, c.user_set, c.onednn);
    EXPECT_EQ(route.backend, c.expected) << c.core << " user_set " << c.user_set;
    EXPECT_EQ(route.warning, "") << c.core;
  }
}

// The library as this process loaded it: whatever OpenBLAS knows of this
// processor's model, the products run on a kernel its flags allow, unless
// the environment named a core (then a warning says so).
TEST(BlasLibraryTest, TheProductsRunOnAKernelTheFlagsAllow) {
  const BlasLibrary& lib = blas_library();
  const bool matched =
      tier_of_openblas_core(lib.core) >= lib.wanted || fp32_backend() == Fp32Backend::kOneDnn;
  if (lib.choice.user_set) {
    EXPECT_EQ(matched, lib.route.warning.empty()) << lib.describe();
  } else {
    EXPECT_TRUE(matched) << lib.describe();
    EXPECT_EQ(lib.route.warning, "") << lib.describe();
  }
  EXPECT_NE(lib.describe().find("core " + lib.core), std::string::npos);
}

// Products of every transpose, with alpha and beta, on the library
// fp32_backend() names now, against double products.
void expect_products_match_double_products() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t m = 67, n = 45, k = 38;
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  for (Op op_a : {Op::kNone, Op::kTranspose}) {
    for (Op op_b : {Op::kNone, Op::kTranspose}) {
      for (float& x : c) x = u(rng);
      const std::vector<float> c0 = c;
      const int64_t lda = op_a == Op::kNone ? k : m, ldb = op_b == Op::kNone ? n : k;
      gemm<float>(op_a, op_b, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), n);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p) {
            const float x = op_a == Op::kNone ? a[i * lda + p] : a[p * lda + i];
            const float y = op_b == Op::kNone ? b[p * ldb + j] : b[j * ldb + p];
            sum += static_cast<double>(x) * y;
          }
          const double want = 0.5 * sum + 2.0 * c0[i * n + j];
          ASSERT_NEAR(c[i * n + j], want, 1e-4) << i << "," << j;
        }
      }
    }
  }
}

// The seam: OpenBLAS reports a core below the flags (Prescott): the
// products go to oneDNN where the flags allow more and the build has it.
TEST(BlasLibraryTest, ProductsOnTheFallbackMatchDoubleProducts) {
  load_gemm_library();
  const GemmTier wanted = blas_library().wanted;
  set_reported_core_for_testing("Prescott");
#ifdef DSCORE_WITH_ONEDNN
  const Fp32Backend expected =
      wanted > GemmTier::kGeneric ? Fp32Backend::kOneDnn : Fp32Backend::kOpenBlas;
#else
  const Fp32Backend expected = Fp32Backend::kOpenBlas;
#endif
  EXPECT_EQ(fp32_backend(), expected);
  expect_products_match_double_products();
  set_reported_core_for_testing(nullptr);
  EXPECT_EQ(fp32_backend(), blas_library().route.backend);
}

// Whichever library the route picks on this machine, the other one's
// products are right too (DSCORE_FP32_GEMM can ask for either).
TEST(BlasLibraryTest, ProductsOnEitherLibraryMatchDoubleProducts) {
  load_gemm_library();
  for (Fp32Backend backend : {Fp32Backend::kOpenBlas, Fp32Backend::kOneDnn}) {
#ifndef DSCORE_WITH_ONEDNN
    if (backend == Fp32Backend::kOneDnn) continue;
#endif
    set_fp32_backend_for_testing(&backend);
    SCOPED_TRACE(backend == Fp32Backend::kOneDnn ? "oneDNN" : "OpenBLAS");
    expect_products_match_double_products();
  }
  set_fp32_backend_for_testing(nullptr);
  EXPECT_EQ(fp32_backend(), blas_library().route.backend);
}

// A core set in the environment before OpenBLAS loads is what it runs, with
// a warning. ctest runs each test in a process of its own; run alone
// otherwise (--gtest_filter), as the library loads once per process.
TEST(BlasLibraryTest, ACoreSetInTheEnvironmentIsRespectedAndWarnedAbout) {
  if (blas_library_loaded()) GTEST_SKIP() << "OpenBLAS already loaded in this process";
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  const BlasLibrary& lib = blas_library();
  EXPECT_TRUE(lib.choice.user_set);
  EXPECT_EQ(lib.core, "Prescott");
  EXPECT_EQ(fp32_backend(), Fp32Backend::kOpenBlas);
  EXPECT_EQ(lib.route.warning.empty(), lib.wanted == GemmTier::kGeneric) << lib.describe();
}

// DSCORE_FP32_GEMM names the fp32 products' library; a name that is none
// of this build's is an error that lists them (ctest: a process of its own).
TEST(BlasLibraryTest, AnUnknownFp32GemmLibraryIsRefusedByName) {
  if (blas_library_loaded()) GTEST_SKIP() << "OpenBLAS already loaded in this process";
  setenv("DSCORE_FP32_GEMM", "mkl", 1);
  try {
    blas_library();
    ADD_FAILURE() << "DSCORE_FP32_GEMM=mkl was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("DSCORE_FP32_GEMM=mkl"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("openblas"), std::string::npos) << e.what();
  }
  unsetenv("DSCORE_FP32_GEMM");
}

}  // namespace
}  // namespace dscore::transformer::cpu
