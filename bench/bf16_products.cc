// bf16_products [--width C] [--tokens N] [--rounds R]: a GPT layer's linear
// products (c_attn, c_proj, c_fc, mlp.c_proj: forward, input gradient,
// weight gradient) through gemm_bf16 on dscore's AMX tiles and on oneDNN's
// kernels (DSCORE_BF16_GEMM=onednn's path), interleaved, best of R rounds,
// each beside the limits cpu_gemm_rate measures in the same run; then the
// copies of operands into the tiles' layouts (AmxA / AmxB::pack, on one
// thread) beside memcpy of the same bytes, the limit they run against.
// Needs a CPU with AMX (else it says why and exits 0: there is nothing to
// compare).
#include <tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dscore/cpp/dtype.hpp>
#include <random>
#include <string>
#include <vector>

#include "cpu_gemm_rate.h"
#include "transformer_common/cpu/amx_gemm.h"
#include "transformer_common/cpu/gemm_bf16.h"

namespace {

using dscore::transformer::cpu::Op;

struct Product {
  std::string name;
  Op op_a, op_b;
  int64_t m, n, k;
  float beta;  // weight gradients add into theirs
};

// nn.Linear(in, out) over N tokens: y = x W^T (+ b); dx = dy W; dW += dy^T x.
void add_linear(std::vector<Product>& out, const std::string& name, int64_t in, int64_t o,
                int64_t N) {
  out.push_back({name + " forward", Op::kNone, Op::kTranspose, N, o, in, 0.0f});
  out.push_back({name + " dx", Op::kNone, Op::kNone, N, in, o, 0.0f});
  out.push_back({name + " dW", Op::kTranspose, Op::kNone, o, in, N, 1.0f});
}

double seconds_of(const Product& p, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                  std::vector<float>& c) {
  const int64_t lda = p.op_a == Op::kNone ? p.k : p.m, ldb = p.op_b == Op::kNone ? p.n : p.k;
  const auto start = std::chrono::steady_clock::now();
  dscore::transformer::cpu::gemm_bf16(p.op_a, p.op_b, p.m, p.n, p.k, 1.0f, a.data(), lda, b.data(),
                                      ldb, p.beta, c.data(), p.n);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Best of `rounds` timings of fn (after one to warm up), in seconds.
template <typename Fn>
double best_of(int rounds, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r <= rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) best = std::min(best, s);
  }
  return best;
}

// The copies a layer's products make of their widest operands (N x 4C:
// the MLP's activation and its gradient), on one thread, beside memcpy.
void print_copies(int64_t C, int64_t N, int rounds) {
  namespace cpu = dscore::transformer::cpu;
  const int64_t rows = N, cols = 4 * C;
  const size_t bytes = static_cast<size_t>(rows * cols) * sizeof(uint16_t);
  std::vector<uint16_t> src(static_cast<size_t>(rows * cols), 0x3f80), dst(src.size());
  cpu::AmxA a;
  cpu::AmxB b;
  const double copy = best_of(rounds, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  struct Copy {
    const char* name;
    double seconds;
  };
  const Copy copies[] = {
      {"B row-major (x of a weight gradient)",
       best_of(rounds, [&] { b.pack(Op::kNone, rows, cols, src.data(), cols); })},
      {"B transposed (a weight, forward)",
       best_of(rounds, [&] { b.pack(Op::kTranspose, cols, rows, src.data(), cols); })},
      {"A transposed (dy of a weight gradient)",
       best_of(rounds, [&] { a.pack(Op::kTranspose, cols, rows, src.data(), cols); })},
      {"A row-major", best_of(rounds, [&] { a.pack(Op::kNone, rows, cols, src.data(), cols); })},
  };
  std::printf(
      "copies into the tiles' layouts, %lld x %lld bf16 (%.1f MB), one thread, best of %d; "
      "memcpy of the same bytes: %.2f GB/s\n",
      static_cast<long long>(rows), static_cast<long long>(cols), bytes / 1e6, rounds,
      bytes / copy / 1e9);
  std::printf("| copy | GB/s | / memcpy |\n|---|---|---|\n");
  for (const Copy& c : copies)
    std::printf("| %s | %.2f | %.2f |\n", c.name, bytes / c.seconds / 1e9, copy / c.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t C = 384, N = 2048;
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--width") {
      C = std::stoll(argv[i + 1]);
    } else if (key == "--tokens") {
      N = std::stoll(argv[i + 1]);
    } else if (key == "--rounds") {
      rounds = std::stoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: bf16_products [--width C] [--tokens N] [--rounds R]\n");
      return 2;
    }
  }
  namespace cpu = dscore::transformer::cpu;
  cpu::load_gemm_library();
  if (!cpu::bf16_gemm_available() || !cpu::amx_gemm_available()) {
    std::printf("bf16_products: nothing to compare here: %s\n",
                !cpu::bf16_gemm_available() ? cpu::bf16_gemm_unavailable_reason()
                                            : cpu::amx_gemm_unavailable_reason());
    return 0;
  }
  const auto before = dscore::bench::measure_cpu_gemm_rate();
  std::vector<Product> products;
  add_linear(products, "c_attn", C, 3 * C, N);
  add_linear(products, "c_proj", C, C, N);
  add_linear(products, "c_fc", C, 4 * C, N);
  add_linear(products, "mlp.c_proj", 4 * C, C, N);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::printf(
      "a GPT layer's bf16 linear products, width %lld, %lld tokens, best of %d "
      "interleaved rounds on %s\n",
      static_cast<long long>(C), static_cast<long long>(N), rounds,
      dscore::bench::describe(before).c_str());
  std::printf("| product | m x n x k | AMX tiles GFLOP/s | oneDNN GFLOP/s | AMX / oneDNN |\n");
  std::printf("|---|---|---|---|---|\n");
  double amx_total = 0, onednn_total = 0;
  for (const Product& p : products) {
    std::vector<uint16_t> a(static_cast<size_t>(p.m * p.k)), b(static_cast<size_t>(p.k * p.n));
    for (auto& x : a) x = dscore::sdk::float_to_bf16(normal(rng));
    for (auto& x : b) x = dscore::sdk::float_to_bf16(normal(rng));
    std::vector<float> c(static_cast<size_t>(p.m * p.n), 0.0f);
    double amx = 1e30, onednn = 1e30;
    for (int r = 0; r <= rounds; ++r) {  // round 0 warms both up
      cpu::set_amx_gemm_declined(false);
      const double t_amx = seconds_of(p, a, b, c);
      cpu::set_amx_gemm_declined(true);
      const double t_onednn = seconds_of(p, a, b, c);
      if (r == 0) continue;
      amx = std::min(amx, t_amx);
      onednn = std::min(onednn, t_onednn);
    }
    cpu::set_amx_gemm_declined(false);
    const double flops =
        2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
    amx_total += amx;
    onednn_total += onednn;
    std::printf("| %s | %lld x %lld x %lld | %.0f | %.0f | %.2f |\n", p.name.c_str(),
                static_cast<long long>(p.m), static_cast<long long>(p.n),
                static_cast<long long>(p.k), flops / amx / 1e9, flops / onednn / 1e9, onednn / amx);
  }
  const auto after = dscore::bench::measure_cpu_gemm_rate();
  std::printf("a layer's twelve products: AMX tiles %.2f ms, oneDNN %.2f ms (AMX / oneDNN %.2f)\n",
              amx_total * 1e3, onednn_total * 1e3, onednn_total / amx_total);
  std::printf("after: %s\n", dscore::bench::describe(after).c_str());
  print_copies(C, N, rounds);
  return 0;
}
