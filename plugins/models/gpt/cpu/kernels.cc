#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "../../transformer_common/cpu/gemm_bf16.h"
#include "../../transformer_common/cpu/parallel.h"
#include "../../transformer_common/cpu/vector_math.h"
#include "layernorm_rows.h"

namespace dscore::gpt::cpu {
namespace {

using transformer::cpu::for_blocks;
using transformer::cpu::gelu_backward_f32;
using transformer::cpu::gelu_forward_f32;
using transformer::cpu::kElementBlock;
using transformer::cpu::kRowBlock;

constexpr double kLayerNormEps = 1e-5;

template <typename T>
T gelu_scale() {
  return static_cast<T>(0.7978845608028654);
}  // sqrt(2/pi)

}  // namespace

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t Tn, int64_t C, int64_t v0, int64_t rows) {
  for_blocks(B * Tn, kRowBlock, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t row = (tokens[r] < 0 ? 0 : tokens[r]) - v0;
      const bool held = row >= 0 && row < rows;
      const T* e = wte + row * C;
      const T* p = wpe + (r % Tn) * C;
      T* o = out + r * C;
      if (held && wpe != nullptr)
        for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
      else if (held)
        for (int64_t c = 0; c < C; ++c) o[c] = e[c];
      else if (wpe != nullptr)
        for (int64_t c = 0; c < C; ++c) o[c] = p[c];
      else
        for (int64_t c = 0; c < C; ++c) o[c] = T{0};
    }
  });
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t Tn,
                      int64_t C, int64_t v0, int64_t rows) {
  // Parallel over channel blocks: each task owns its columns of dwte and
  // dwpe, and adds rows in order (no races, fixed order).
  for_blocks(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < B * Tn; ++r) {
      const int64_t row = (tokens[r] < 0 ? 0 : tokens[r]) - v0;
      const T* d = dout + r * C;
      if (row >= 0 && row < rows) {
        T* e = dwte + row * C;
        for (int64_t c = c0; c < c1; ++c) e[c] += d[c];
      }
      T* p = dwpe + (r % Tn) * C;
      for (int64_t c = c0; c < c1; ++c) p[c] += d[c];
    }
  });
}

template <typename T>
void layernorm_forward_row(T* o, T* mean, T* rstd, const T* x, const T* weight, const T* bias,
                           int64_t C) {
  if constexpr (std::is_same_v<T, float>) {
    if (layernorm_rows_vectorized())
      return layernorm_forward_row_avx2(o, mean, rstd, x, weight, bias, C,
                                        static_cast<float>(kLayerNormEps));
  }
  T m = 0;
  for (int64_t c = 0; c < C; ++c) m += x[c];
  m /= static_cast<T>(C);
  T v = 0;
  for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
  v /= static_cast<T>(C);
  const T s = static_cast<T>(1) / std::sqrt(v + static_cast<T>(kLayerNormEps));
  for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  *mean = m;
  *rstd = s;
}

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C) {
  for_blocks(N, kRowBlock, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      layernorm_forward_row(out + r * C, mean + r, rstd + r, inp + r * C, weight, bias, C);
  });
}

template <typename T>
void residual_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* a, const T* b,
                                const T* weight, const T* bias, int64_t N, int64_t C) {
  for_blocks(N, kRowBlock, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* x = sum + r * C;
      const T* ar = a + r * C;
      const T* br = b + r * C;
      for (int64_t c = 0; c < C; ++c) x[c] = ar[c] + br[c];
      layernorm_forward_row(out + r * C, mean + r, rstd + r, x, weight, bias, C);
    }
  });
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C) {
  // Per block of rows: dinp, and partial weight/bias sums; the partials are
  // then added block after block (a fixed order).
  const int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
  std::vector<T> partial(static_cast<size_t>(blocks * 2 * C), T{0});
  for_blocks(N, kRowBlock, [&](int64_t r0, int64_t r1) {
    T* pw = partial.data() + (r0 / kRowBlock) * 2 * C;
    T* pb = pw + C;
    for (int64_t r = r0; r < r1; ++r) {
      const T* x = inp + r * C;
      const T* d = dout + r * C;
      const T m = mean[r], s = rstd[r];
      if constexpr (std::is_same_v<T, float>) {
        if (layernorm_rows_vectorized()) {
          layernorm_backward_row_avx2(dinp + r * C, pw, pb, d, x, weight, m, s, C);
          continue;
        }
      }
      T dnorm_mean = 0, dnorm_norm_mean = 0;
      for (int64_t c = 0; c < C; ++c) {
        const T norm = (x[c] - m) * s;
        const T dnorm = weight[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= static_cast<T>(C);
      dnorm_norm_mean /= static_cast<T>(C);
      T* dx = dinp + r * C;
      for (int64_t c = 0; c < C; ++c) {
        const T norm = (x[c] - m) * s;
        const T dnorm = weight[c] * d[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        pw[c] += norm * d[c];
        pb[c] += d[c];
      }
    }
  });
  for_blocks(C, 256, [&](int64_t c0, int64_t c1) {
    for (int64_t b = 0; b < blocks; ++b) {
      const T* pw = partial.data() + b * 2 * C;
      for (int64_t c = c0; c < c1; ++c) {
        dweight[c] += pw[c];
        dbias[c] += pw[C + c];
      }
    }
  });
}

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for_blocks(n, kElementBlock,
               [&](int64_t i0, int64_t i1) { gelu_forward_f32(out + i0, inp + i0, i1 - i0); });
    return;
  }
  const T s = gelu_scale<T>();
  for_blocks(n, kElementBlock, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T x = inp[i];
      out[i] = static_cast<T>(0.5) * x *
               (static_cast<T>(1) + std::tanh(s * (x + static_cast<T>(0.044715) * x * x * x)));
    }
  });
}

// The scalar GELU gradient (T = double), dinp = gelu'(inp) * dout.
template <typename T>
void gelu_backward_rows(T* dinp, const T* inp, const T* dout, int64_t n) {
  const T s = gelu_scale<T>();
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = s * (x + static_cast<T>(0.044715) * x * x * x);
    const T th = std::tanh(u);
    const T sech2 = static_cast<T>(1) - th * th;
    const T du = s * (static_cast<T>(1) + static_cast<T>(3 * 0.044715) * x * x);
    const T grad =
        static_cast<T>(0.5) * (static_cast<T>(1) + th) + static_cast<T>(0.5) * x * sech2 * du;
    dinp[i] = grad * dout[i];
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  for_blocks(n, kElementBlock, [&](int64_t i0, int64_t i1) {
    if constexpr (std::is_same_v<T, float>) {
      gelu_backward_f32(dinp + i0, inp + i0, dout + i0, i1 - i0);
    } else {
      gelu_backward_rows(dinp + i0, inp + i0, dout + i0, i1 - i0);
    }
  });
}

template <typename T>
void gelu_backward_bias(T* dinp, T* dbias, const T* inp, const T* dout, int64_t N, int64_t OC) {
  // Each block of rows: its GELU gradient, then (still in cache) its sum
  // into the block's bias partial: one pass over the (N, OC) gradient fewer.
  transformer::cpu::add_row_sums(dbias, dinp, N, OC, [&](int64_t r0, int64_t r1) {
    const int64_t at = r0 * OC, n = (r1 - r0) * OC;
    if constexpr (std::is_same_v<T, float>) {
      gelu_backward_f32(dinp + at, inp + at, dout + at, n);
    } else {
      gelu_backward_rows(dinp + at, inp + at, dout + at, n);
    }
  });
}

namespace {

// Elements per rounding chunk: GELU's fp32 values stay in L1 until rounded.
constexpr int64_t kRoundChunk = 1024;

// Each row's fp32 LayerNorm output in `row` (a task's scratch), then
// rounded into row r of out.
template <typename RowInput>
void layernorm_rows_bf16(uint16_t* out, float* mean, float* rstd, const float* weight,
                         const float* bias, int64_t N, int64_t C, RowInput&& row_input) {
  for_blocks(N, kRowBlock, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> row;
    if (row.size() < static_cast<size_t>(C)) row.resize(static_cast<size_t>(C));
    for (int64_t r = r0; r < r1; ++r) {
      layernorm_forward_row(row.data(), mean + r, rstd + r, row_input(r), weight, bias, C);
      transformer::cpu::round_to_bf16_serial(out + r * C, row.data(), C);
    }
  });
}

}  // namespace

void layernorm_forward_bf16(uint16_t* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int64_t N, int64_t C) {
  layernorm_rows_bf16(out, mean, rstd, weight, bias, N, C, [&](int64_t r) { return inp + r * C; });
}

void residual_layernorm_forward_bf16(float* sum, uint16_t* out, float* mean, float* rstd,
                                     const float* a, const float* b, const float* weight,
                                     const float* bias, int64_t N, int64_t C) {
  layernorm_rows_bf16(out, mean, rstd, weight, bias, N, C, [&](int64_t r) {
    float* x = sum + r * C;
    const float* ar = a + r * C;
    const float* br = b + r * C;
    for (int64_t c = 0; c < C; ++c) x[c] = ar[c] + br[c];
    return static_cast<const float*>(x);
  });
}

namespace {

// out[i] = gelu(inp[i]) rounded, for i < n, on the calling thread.
void gelu_round(uint16_t* out, const float* inp, int64_t n) {
  float values[kRoundChunk];
  for (int64_t i = 0; i < n; i += kRoundChunk) {
    const int64_t len = std::min(kRoundChunk, n - i);
    gelu_forward_f32(values, inp + i, len);
    transformer::cpu::round_to_bf16_serial(out + i, values, len);
  }
}

}  // namespace

void gelu_forward_bf16_rows(float* fch, uint16_t* out, const float* rows, int64_t r0, int64_t r1,
                            int64_t OC) {
  // Row by row: GELU reads each row again while it is in L1.
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = rows + (r - r0) * OC;
    transformer::cpu::copy_streaming_f32(fch + r * OC, row, OC);
    gelu_round(out + r * OC, row, OC);
  }
}

void gelu_backward_bias_bf16_rows(uint16_t* dinp, transformer::cpu::RowSumPartials<float>& dbias,
                                  const float* inp, float* dout_rows, int64_t r0, int64_t r1,
                                  int64_t OC) {
  // Row by row, its three passes over a row still in L1 (over the chunk,
  // the second and third read it back from L2); the same bits either way.
  for (int64_t r = r0; r < r1; ++r) {
    float* row = dout_rows + (r - r0) * OC;
    // inp was written in the forward and comes from memory: its rows two
    // ahead are asked for now, so they arrive while this one is worked on.
    if (r + 2 < r1) transformer::cpu::prefetch_floats(inp + (r + 2) * OC, OC);
    gelu_backward_f32(row, inp + r * OC, row, OC);
    transformer::cpu::round_to_bf16_serial(dinp + r * OC, row, OC);
    dbias.add(r, r + 1, row);
  }
}

#define DSCORE_GPT_INSTANTIATE(T)                                                                 \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,      \
                                   int64_t, int64_t, int64_t);                                    \
  template void encoder_backward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t,  \
                                    int64_t, int64_t);                                            \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t); \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,         \
                                      const T*, int64_t, int64_t);                                \
  template void gelu_forward<T>(T*, const T*, int64_t);                                           \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);                                \
  template void residual_layernorm_forward<T>(T*, T*, T*, T*, const T*, const T*, const T*,       \
                                              const T*, int64_t, int64_t);                        \
  template void gelu_backward_bias<T>(T*, T*, const T*, const T*, int64_t, int64_t);

DSCORE_GPT_INSTANTIATE(float)
DSCORE_GPT_INSTANTIATE(double)
#undef DSCORE_GPT_INSTANTIATE

}  // namespace dscore::gpt::cpu
