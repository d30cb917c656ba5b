// libFuzzer target for load_config_text (built with DSCORE_FUZZ=ON and
// clang). The first bytes choose the world size and whether --steps and a
// hidden size are given; the rest is the config text. Run:
//   build/<dir>/bin/config_fuzzer tests/fuzz/corpus -max_total_time=60
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/config/config.h"
#include "tests/fuzz/config_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dscore::config;
  ResolveContext ctx;
  if (size >= 2) {
    ctx.world_size = 1 + data[0] % 8;
    if (data[1] & 1) ctx.train_steps = data[1] >> 1;
    if (data[1] & 2) ctx.hidden_size = 16 * (1 + (data[1] >> 2));
  }
  const std::string text(reinterpret_cast<const char*>(data), size);
  LoadedConfig c = load_config_text(text, "fuzz.json", ctx);
  std::string problem = check_loaded(c, text, ctx);
  if (!problem.empty()) {
    std::fprintf(stderr, "%s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
