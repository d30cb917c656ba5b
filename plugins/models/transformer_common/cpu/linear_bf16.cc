#include "linear_bf16.h"

#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "row_sums.h"

namespace dscore::transformer::cpu {
namespace {

// The rounded operands, reused from call to call (a layer's linears run one
// after another on the runner's thread); per thread, as runners on several
// threads (ranks in one process) each have their own.
thread_local AlignedVector<uint16_t> inp_bf16, dout_bf16;

// lend_unwritten_gradient's buffers on this thread: (start, elements).
thread_local std::vector<std::pair<float*, int64_t>> unwritten;

void unpoison([[maybe_unused]] float* p, [[maybe_unused]] int64_t n) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_UNPOISON_MEMORY_REGION(p, static_cast<size_t>(n) * sizeof(float));
#endif
}

}  // namespace

void lend_unwritten_gradient(float* p, int64_t n) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_POISON_MEMORY_REGION(p, static_cast<size_t>(n) * sizeof(float));
#endif
  unwritten.emplace_back(p, n);
}

bool overwrites_unwritten_gradient(float* p, int64_t n) {
  for (auto it = unwritten.begin(); it != unwritten.end(); ++it) {
    auto [start, size] = *it;
    if (p < start || p >= start + size) continue;
    unwritten.erase(it);
    unpoison(start, size);
    if (p == start && n == size) return true;
    std::memset(start, 0, static_cast<size_t>(size) * sizeof(float));
    return false;
  }
  return false;
}

bool end_unwritten_gradient(float* p) {
  for (auto it = unwritten.begin(); it != unwritten.end(); ++it) {
    if (it->first != p) continue;
    unpoison(it->first, it->second);
    unwritten.erase(it);
    return true;
  }
  return false;
}

uint64_t linear_bf16_working_bytes(int64_t N, int64_t max_in, int64_t max_out) {
  return static_cast<uint64_t>(N * (max_in + max_out)) * sizeof(uint16_t);
}

namespace {

// The operand's bf16 values: as given, or rounded into `buffer`.
const uint16_t* rounded(Bf16Operand operand, AlignedVector<uint16_t>& buffer, int64_t n) {
  return operand.rounded != nullptr ? operand.rounded : round_to_bf16(buffer, operand.values, n);
}

}  // namespace

void matmul_forward_bf16(float* out, Bf16Operand inp, const uint16_t* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC) {
  const uint16_t* x = rounded(inp, inp_bf16, N * C);
  // The bias is added inside the GEMM (the fp32 path writes it into out first).
  gemm_bf16(Op::kNone, Op::kTranspose, N, OC, C, 1.0f, x, C, weight, C, 0.0f, out, OC, bias);
}

void matmul_forward_bf16_consumed(Bf16Operand inp, const uint16_t* weight, const float* bias,
                                  int64_t N, int64_t C, int64_t OC, const ConsumeRows& consume) {
  const uint16_t* x = rounded(inp, inp_bf16, N * C);
  gemm_bf16_consumed(Op::kTranspose, N, OC, C, x, C, weight, C, bias, consume);
}

namespace {

// dout's bf16 values, its rows summed into dbias first where there is one.
const uint16_t* rounded_dout(float* dbias, Bf16Operand dout, int64_t N, int64_t OC) {
  if (dbias == nullptr) return rounded(dout, dout_bf16, N * OC);
  if (dout.values == nullptr)
    throw std::logic_error("matmul_backward_bf16: a bias gradient needs dout's fp32 values");
  // The bias gradient sums the fp32 gradient's rows (the fp32 layer's
  // bits); each block of rows is rounded in the same pass, still in cache.
  if (dout_bf16.size() < static_cast<size_t>(N * OC)) dout_bf16.resize(static_cast<size_t>(N * OC));
  uint16_t* rounded_rows = dout_bf16.data();
  add_row_sums(dbias, dout.values, N, OC, [&](int64_t r0, int64_t r1) {
    round_to_bf16_serial(rounded_rows + r0 * OC, dout.values + r0 * OC, (r1 - r0) * OC);
  });
  return rounded_rows;
}

void weight_gradient(float* dweight, const uint16_t* d, Bf16Operand inp, int64_t N, int64_t C,
                     int64_t OC) {
  const uint16_t* x = rounded(inp, inp_bf16, N * C);
  const float beta = overwrites_unwritten_gradient(dweight, OC * C) ? 0.0f : 1.0f;
  gemm_bf16(Op::kTranspose, Op::kNone, OC, C, N, 1.0f, d, OC, x, C, beta, dweight, C);
}

}  // namespace

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, Bf16Operand dout,
                          Bf16Operand inp, const uint16_t* weight, int64_t N, int64_t C, int64_t OC,
                          bool accumulate_dinp) {
  const uint16_t* d = rounded_dout(dbias, dout, N, OC);
  gemm_bf16(Op::kNone, Op::kNone, N, C, OC, 1.0f, d, OC, weight, C, accumulate_dinp ? 1.0f : 0.0f,
            dinp, C);
  weight_gradient(dweight, d, inp, N, C, OC);
}

void matmul_backward_bf16_consumed(float* dweight, float* dbias, Bf16Operand dout, Bf16Operand inp,
                                   const uint16_t* weight, int64_t N, int64_t C, int64_t OC,
                                   const ConsumeRows& consume_dinp) {
  const uint16_t* d = rounded_dout(dbias, dout, N, OC);
  gemm_bf16_consumed(Op::kNone, N, C, OC, d, OC, weight, C, nullptr, consume_dinp);
  weight_gradient(dweight, d, inp, N, C, OC);
}

void matmul_forward_bf16(float* out, const float* inp, const uint16_t* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC) {
  matmul_forward_bf16(out, Bf16Operand{inp, nullptr}, weight, bias, N, C, OC);
}

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const uint16_t* weight, int64_t N, int64_t C,
                          int64_t OC, bool accumulate_dinp) {
  matmul_backward_bf16(dinp, dweight, dbias, Bf16Operand{dout, nullptr}, Bf16Operand{inp, nullptr},
                       weight, N, C, OC, accumulate_dinp);
}

}  // namespace dscore::transformer::cpu
