// cpu_gemm_rate [--n 2048] [--repeats 5] [--threads T]: the limit CPU GPT
// figures are read against (cpu_gemm_rate.h); the last two lines are
// machine-readable: "bf16_gflops <value>" (0 where there is no bf16 GEMM)
// and "fp32_gflops <value>".
#include <cstdio>
#include <string>

#include "cpu_gemm_rate.h"

int main(int argc, char** argv) {
  long long n = 2048;
  int repeats = 5, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--n") {
      n = std::stoll(argv[i + 1]);
    } else if (k == "--repeats") {
      repeats = std::stoi(argv[i + 1]);
    } else if (k == "--threads") {
      threads = std::stoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: cpu_gemm_rate [--n N] [--repeats R] [--threads T]\n");
      return 2;
    }
  }
  const auto rate = dscore::bench::measure_cpu_gemm_rate(n, repeats, threads);
  std::printf("%s\nbf16_gflops %.2f\nfp32_gflops %.2f\n", dscore::bench::describe(rate).c_str(),
              rate.bf16_gflops, rate.fp32_gflops);
  return 0;
}
