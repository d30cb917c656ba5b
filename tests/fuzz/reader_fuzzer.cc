// libFuzzer targets for the readers of reader_targets.h, one executable per
// target (DSCORE_FUZZ=ON with clang; tests/fuzz/CMakeLists.txt). A finding
// aborts with what went wrong. Run, e.g.:
//   build/fuzz/bin/reader_fuzzer_safetensors_header tests/fuzz/readers/safetensors \
//     -max_total_time=120
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tests/fuzz/reader_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string problem =
      dscore::fuzz::DSCORE_FUZZ_TARGET(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!problem.empty()) {
    std::fprintf(stderr, "%s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
