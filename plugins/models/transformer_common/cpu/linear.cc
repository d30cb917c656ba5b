#include "linear.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "gemm.h"
#include "gemm_bf16.h"
#include "linear_bf16.h"
#include "parallel.h"
#include "row_sums.h"
#include "vector_math.h"

namespace dscore::transformer::cpu {

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                    int64_t OC) {
  if (bias == nullptr) {
    gemm<T>(Op::kNone, Op::kTranspose, N, OC, C, T{1}, inp, C, weight, C, T{0}, out, OC);
    return;
  }
  // The bias first, then the product added to it (beta 1): one pass over
  // `out` fewer than zeroing it (BLAS does that for beta 0) and adding the
  // bias after.
  for_blocks(N, kRowBlock, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy(bias, bias + OC, out + r * OC);
  });
  gemm<T>(Op::kNone, Op::kTranspose, N, OC, C, T{1}, inp, C, weight, C, T{1}, out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t C, int64_t OC, bool accumulate_dinp) {
  gemm<T>(Op::kNone, Op::kNone, N, C, OC, T{1}, dout, OC, weight, C, accumulate_dinp ? T{1} : T{0},
          dinp, C);
  gemm<T>(Op::kTranspose, Op::kNone, OC, C, N, T{1}, dout, OC, inp, C, T{1}, dweight, C);
  if (dbias != nullptr) add_row_sums(dbias, dout, N, OC);
}

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n) {
  for_blocks(n, kElementBlock, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  });
}

// About 16M logits (64 MiB in fp32) at a time.
int64_t lm_rows_per_block(int64_t N, int64_t V) {
  return std::clamp<int64_t>((int64_t{1} << 24) / std::max<int64_t>(V, 1), 16,
                             std::max<int64_t>(N, 16));
}

uint64_t lm_head_working_bytes(int64_t N, int64_t V) {
  return static_cast<uint64_t>(lm_rows_per_block(N, V)) *
         (static_cast<uint64_t>(V) * sizeof(float) + 2 * sizeof(double));
}

uint64_t lm_head_bf16_working_bytes(int64_t N, int64_t C, int64_t V) {
  return static_cast<uint64_t>(lm_rows_per_block(N, V)) * static_cast<uint64_t>(C + V) *
             sizeof(uint16_t) +                    // x16_storage and d16_storage
         bf16_packed_bytes(Op::kTranspose, V, C);  // packed_wt_storage
}

namespace {

// Softmax of each row of logits (rows x V) in place; returns per-row
// log-sum-exp through lse. on_lanes (T = float): on vector lanes
// (softmax_row_f32), for the bf16 head; else the scalar loop, whose bits
// the fp32 head keeps.
template <typename T>
void softmax_rows(T* logits, int64_t rows, int64_t V, double* lse, bool on_lanes = false) {
  for_blocks(rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* z = logits + r * V;
      if constexpr (std::is_same_v<T, float>) {
        if (on_lanes) {
          lse[r] = softmax_row_f32(z, V);
          continue;
        }
      }
      lse[r] = softmax_row_scalar(z, V);
    }
  });
}

// The bf16 weight in oneDNN's blocked layout, as the logits product reads
// it (W^T): copied once per call of lm_head_forward_backward, so the logits
// are made in blocks of whole rows on oneDNN's AMX kernel (in blocks of
// columns, which a plain gemm_bf16 cuts for a wide head, it has none; on the
// ~100M Llama's 32000-token head the logits' products took 386 instead of
// 605 ms over 4 steps). Not dx's product (W, 32000 deep): there the AMX
// kernel on whole rows ran 2.4 times slower than the column blocks. Kept
// from call to call on the calling thread, as the operands of linear_bf16.
// (On AMX tiles the copy is kept by Bf16PackedB itself; gemm_bf16.h.)
thread_local AlignedVector<uint8_t> packed_wt_storage;

// The head's other working memory, kept from call to call on the calling
// thread likewise: a block of logits is tens of MB for a large vocabulary,
// and allocated afresh each pass it was faulted in and zeroed every step.
template <typename X>
X* kept_buffer(int64_t n) {
  thread_local AlignedVector<X> buffer;
  if (buffer.size() < static_cast<size_t>(n)) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}
thread_local AlignedVector<uint16_t> x16_storage, d16_storage;

// The three products of lm_head_forward_backward for a block of rows: in
// T, or (w16 set, T = float) on the bf16 GEMM with x and dlogits rounded.
template <typename T>
class LmHeadProducts {
 public:
  LmHeadProducts(const T* x, const T* w, const uint16_t* w16, int64_t C, int64_t V)
      : x_(x), w_(w), w16_(w16), C_(C), V_(V) {
    if (w16_ != nullptr && !std::is_same_v<T, float>)
      throw std::logic_error("lm_head_forward_backward: bf16 weights need T = float");
    if (w16_ != nullptr) packed_wt_.emplace(Op::kTranspose, V, C, w16, C, packed_wt_storage);
  }
  void logits(int64_t r0, int64_t rows, T* logits) {
    if constexpr (std::is_same_v<T, float>) {
      if (w16_ != nullptr) {
        const uint16_t* x16 = round_to_bf16(x16_storage, x_ + r0 * C_, rows * C_);
        gemm_bf16_packed(rows, x16, C_, *packed_wt_, logits, V_);
        return;
      }
    }
    gemm<T>(Op::kNone, Op::kTranspose, rows, V_, C_, T{1}, x_ + r0 * C_, C_, w_, C_, T{0}, logits,
            V_);
  }
  // dx rows = dlogits w (overwritten); dw += dlogits^T x. x16_storage still
  // holds this block's rounded rows from logits().
  void backward(int64_t r0, int64_t rows, const T* dlogits, T* dx, T* dw) {
    if constexpr (std::is_same_v<T, float>) {
      if (w16_ != nullptr) {
        const uint16_t* d16 = round_to_bf16(d16_storage, dlogits, rows * V_);
        gemm_bf16(Op::kNone, Op::kNone, rows, C_, V_, 1.0f, d16, V_, w16_, C_, 0.0f, dx + r0 * C_,
                  C_);
        // The first block may overwrite a weight gradient lent unwritten.
        const float beta = overwrites_unwritten_gradient(dw, V_ * C_) ? 0.0f : 1.0f;
        gemm_bf16(Op::kTranspose, Op::kNone, V_, C_, rows, 1.0f, d16, V_, x16_storage.data(), C_,
                  beta, dw, C_);
        return;
      }
    }
    gemm<T>(Op::kNone, Op::kNone, rows, C_, V_, T{1}, dlogits, V_, w_, C_, T{0}, dx + r0 * C_, C_);
    gemm<T>(Op::kTranspose, Op::kNone, V_, C_, rows, T{1}, dlogits, V_, x_ + r0 * C_, C_, T{1}, dw,
            C_);
  }

 private:
  const T* x_;
  const T* w_;
  const uint16_t* w16_;
  int64_t C_, V_;
  std::optional<Bf16PackedB> packed_wt_;
};

}  // namespace

template <typename T>
double lm_head_forward_backward(T* dx, T* dw, const T* x, const T* w, const int32_t* targets,
                                int64_t N, int64_t C, int64_t V, double grad_scale,
                                const uint16_t* w16) {
  const int64_t rb = lm_rows_per_block(N, V);
  LmHeadProducts<T> products(x, w, w16, C, V);
  T* const logits = kept_buffer<T>(rb * V);
  std::vector<double> lse(static_cast<size_t>(rb));
  std::vector<double> row_loss(static_cast<size_t>(rb));
  double loss = 0;
  for (int64_t r0 = 0; r0 < N; r0 += rb) {
    const int64_t rows = std::min(rb, N - r0);
    products.logits(r0, rows, logits);
    // Target logit before the softmax overwrites it.
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t y = targets[r0 + r];
      row_loss[r] = y < 0 ? 0.0 : -static_cast<double>(logits[r * V + y]);
    }
    softmax_rows(logits, rows, V, lse.data(), /*on_lanes=*/w16 != nullptr);
    for_blocks(rows, 4, [&](int64_t a, int64_t b) {  // dlogits = scale * (p - onehot)
      for (int64_t r = a; r < b; ++r) {
        T* z = logits + r * V;
        const int32_t y = targets[r0 + r];
        if (y < 0) {
          std::fill(z, z + V, T{0});
          continue;
        }
        const T g = static_cast<T>(grad_scale);
        for (int64_t v = 0; v < V; ++v) z[v] *= g;
        z[y] -= g;
      }
    });
    for (int64_t r = 0; r < rows; ++r)
      if (targets[r0 + r] >= 0) loss += row_loss[r] + lse[r];
    products.backward(r0, rows, logits, dx, dw);
  }
  return loss;
}

template <typename T>
double lm_head_forward(const T* x, const T* w, const int32_t* targets, int64_t N, int64_t C,
                       int64_t V, const int64_t* rows, int64_t n_rows, float* logits_out) {
  double loss = 0;
  std::vector<T> logits;
  if (targets != nullptr) {
    const int64_t rb = lm_rows_per_block(N, V);
    logits.resize(static_cast<size_t>(rb * V));
    std::vector<double> lse(static_cast<size_t>(rb));
    for (int64_t r0 = 0; r0 < N; r0 += rb) {
      const int64_t count = std::min(rb, N - r0);
      gemm<T>(Op::kNone, Op::kTranspose, count, V, C, T{1}, x + r0 * C, C, w, C, T{0},
              logits.data(), V);
      std::vector<double> target_logit(static_cast<size_t>(count));
      for (int64_t r = 0; r < count; ++r) {
        const int32_t y = targets[r0 + r];
        target_logit[r] = y < 0 ? 0.0 : static_cast<double>(logits[r * V + y]);
      }
      softmax_rows(logits.data(), count, V, lse.data());
      for (int64_t r = 0; r < count; ++r)
        if (targets[r0 + r] >= 0) loss += lse[r] - target_logit[r];
    }
  }
  if (logits_out != nullptr) {
    logits.resize(static_cast<size_t>(V));
    for (int64_t i = 0; i < n_rows; ++i) {
      gemm<T>(Op::kNone, Op::kTranspose, 1, V, C, T{1}, x + rows[i] * C, C, w, C, T{0},
              logits.data(), V);
      for (int64_t v = 0; v < V; ++v) logits_out[i * V + v] = static_cast<float>(logits[v]);
    }
  }
  return loss;
}

#define DSCORE_LINEAR_INSTANTIATE(T)                                                               \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);    \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t,     \
                                   int64_t, bool);                                                 \
  template void add<T>(T*, const T*, const T*, int64_t);                                           \
  template double lm_head_forward_backward<T>(T*, T*, const T*, const T*, const int32_t*, int64_t, \
                                              int64_t, int64_t, double, const uint16_t*);          \
  template double lm_head_forward<T>(const T*, const T*, const int32_t*, int64_t, int64_t,         \
                                     int64_t, const int64_t*, int64_t, float*);

DSCORE_LINEAR_INSTANTIATE(float)
DSCORE_LINEAR_INSTANTIATE(double)
#undef DSCORE_LINEAR_INSTANTIATE

}  // namespace dscore::transformer::cpu
