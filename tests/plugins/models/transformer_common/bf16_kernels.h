// A test fixture whose tests run once on oneDNN's bf16 kernels and once,
// where the CPU has AMX, on dscore's AMX tiles (amx_gemm.h); the parameter:
// whether the tiles are declined, as DSCORE_BF16_GEMM=onednn declines them.
// Instantiate with ::testing::Values(true, false) and bf16_kernel_name.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "transformer_common/cpu/amx_gemm.h"
#include "transformer_common/cpu/gemm.h"

namespace dscore::transformer::cpu {

class Bf16Kernels : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    load_gemm_library();
    if (!GetParam() && !amx_gemm_available())
      GTEST_SKIP() << "no AMX products here: " << amx_gemm_unavailable_reason();
    set_amx_gemm_declined(GetParam());
  }
  void TearDown() override { set_amx_gemm_declined(false); }
};

inline std::string bf16_kernel_name(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "OneDnn" : "Amx";
}

}  // namespace dscore::transformer::cpu
