#include "openblas_core.h"

#include <algorithm>
#include <cctype>

namespace dscore::transformer::cpu {
namespace {

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool any_of_names(std::string_view core, std::initializer_list<std::string_view> names) {
  return std::any_of(names.begin(), names.end(),
                     [&](std::string_view name) { return same_name(core, name); });
}

}  // namespace

const char* gemm_tier_name(GemmTier tier) {
  switch (tier) {
    case GemmTier::kAvx512:
      return "avx512";
    case GemmTier::kAvx2:
      return "avx2";
    case GemmTier::kGeneric:
      break;
  }
  return "generic";
}

CpuFlags CpuFlags::of_this_cpu() {
  CpuFlags flags;
  flags.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  flags.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  flags.avx512_bf16 = flags.avx512 && __builtin_cpu_supports("avx512bf16");
  flags.amd = __builtin_cpu_is("amd");
  return flags;
}

std::string CpuFlags::describe() const {
  std::string text = avx512 ? "avx512" : avx2_fma ? "avx2+fma" : "no avx2";
  if (avx512_bf16) text += " avx512_bf16";
  return text + (amd ? ", AMD" : ", Intel");
}

GemmTier tier_of_flags(const CpuFlags& flags, sdk::CpuIsa cap) {
  GemmTier tier = flags.avx512     ? GemmTier::kAvx512
                  : flags.avx2_fma ? GemmTier::kAvx2
                                   : GemmTier::kGeneric;
  const GemmTier limit = cap == sdk::CpuIsa::kAvx512 ? GemmTier::kAvx512
                         : cap == sdk::CpuIsa::kAvx2 ? GemmTier::kAvx2
                                                     : GemmTier::kGeneric;
  return std::min(tier, limit);
}

GemmTier tier_of_openblas_core(std::string_view core) {
  if (any_of_names(core, {"SkylakeX", "Cooperlake", "SapphireRapids"})) return GemmTier::kAvx512;
  if (any_of_names(core, {"Haswell", "Zen"})) return GemmTier::kAvx2;
  return GemmTier::kGeneric;
}

std::string openblas_core_for(const CpuFlags& flags, GemmTier tier) {
  switch (tier) {
    case GemmTier::kAvx512:
      return flags.avx512_bf16 ? "Cooperlake" : "SkylakeX";
    case GemmTier::kAvx2:
      return flags.amd ? "Zen" : "Haswell";
    case GemmTier::kGeneric:
      break;
  }
  return "";
}

CoreChoice choose_openblas_core(const CpuFlags& flags, GemmTier wanted, const char* user_core,
                                bool already_loaded) {
  if (user_core != nullptr && user_core[0] != '\0')
    return {"", std::string("OPENBLAS_CORETYPE=") + user_core + " (set in the environment)", true};
  if (already_loaded)
    return {"", "OpenBLAS was loaded by the program before dscore could choose its core"};
  const std::string core = openblas_core_for(flags, wanted);
  if (core.empty())
    return {"", std::string("the CPU's flags (") + flags.describe() + ") allow no wider core"};
  return {core, std::string("chosen from the CPU's flags (") + flags.describe() +
                    "), not its model number"};
}

Fp32Route choose_fp32_route(std::string_view reported_core, GemmTier wanted, bool user_set_core,
                            bool onednn_available) {
  const GemmTier have = tier_of_openblas_core(reported_core);
  // On AVX-512, oneDNN's sgemm outran OpenBLAS's best core (Cooperlake) on
  // the models' products: the bench GPT 8-11% faster a step, a 100M GPT
  // 2-4% (bench/README.md#the-fp32-gemm-library); on AVX2 they tied. A core
  // the user set keeps the products on OpenBLAS.
  if (have >= wanted) {
    if (!user_set_core && onednn_available && wanted == GemmTier::kAvx512)
      return {Fp32Backend::kOneDnn, ""};
    return {};
  }
  const std::string runs = std::string("OpenBLAS runs its ") + std::string(reported_core) +
                           " kernel (" + gemm_tier_name(have) + ") on a CPU with " +
                           gemm_tier_name(wanted) + " instructions";
  if (user_set_core)
    return {Fp32Backend::kOpenBlas,
            runs + ", as OPENBLAS_CORETYPE asks; unset it to let dscore choose by the flags"};
  if (onednn_available)
    return {Fp32Backend::kOneDnn, runs + "; the fp32 products run on oneDNN's sgemm instead"};
  return {Fp32Backend::kOpenBlas,
          runs + " and this build has no oneDNN to take the products: set OPENBLAS_CORETYPE=" +
              std::string(wanted == GemmTier::kAvx512 ? "SkylakeX" : "Haswell") +
              " before starting the program, or build with oneDNN (scripts/setup.sh)"};
}

}  // namespace dscore::transformer::cpu
