#include "kernels.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "../../transformer_common/cpu/gemm_bf16.h"
#include "../../transformer_common/cpu/parallel.h"
#include "../../transformer_common/cpu/vector_math.h"

namespace dscore::llama::cpu {
namespace {

using transformer::cpu::for_blocks;
using transformer::cpu::kElementBlock;
using transformer::cpu::kRowBlock;

template <typename T>
T sigmoid(T x) {
  return static_cast<T>(1) / (static_cast<T>(1) + std::exp(-x));
}

}  // namespace

namespace {

// out's rows: embed's row of each token (E values, as_t converting one), or
// zeros for a token outside rows [v0, v0 + rows).
template <typename T, typename E, typename AsT>
void embed_rows(T* out, const int32_t* tokens, const E* embed, int64_t N, int64_t C, int64_t v0,
                int64_t rows, AsT&& as_t) {
  for_blocks(N, kRowBlock, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t row = (tokens[r] < 0 ? 0 : tokens[r]) - v0;
      T* o = out + r * C;
      if (row < 0 || row >= rows) {
        std::fill(o, o + C, T{0});
        continue;
      }
      const E* e = embed + row * C;
      for (int64_t c = 0; c < C; ++c) o[c] = as_t(e[c]);
    }
  });
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* embed, int64_t N, int64_t C,
                       int64_t v0, int64_t rows) {
  embed_rows(out, tokens, embed, N, C, v0, rows, [](T x) { return x; });
}

void embedding_forward_bf16(float* out, const int32_t* tokens, const uint16_t* embed, int64_t N,
                            int64_t C, int64_t v0, int64_t rows) {
  embed_rows(out, tokens, embed, N, C, v0, rows, [](uint16_t h) { return sdk::bf16_to_float(h); });
}

template <typename T>
void embedding_backward(T* dembed, const T* dout, const int32_t* tokens, int64_t N, int64_t C,
                        int64_t v0, int64_t rows) {
  // Parallel over channel blocks: each task owns its columns of dembed and
  // adds rows in order (no races, fixed order).
  for_blocks(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < N; ++r) {
      const int64_t row = (tokens[r] < 0 ? 0 : tokens[r]) - v0;
      if (row < 0 || row >= rows) continue;
      const T* d = dout + r * C;
      T* e = dembed + row * C;
      for (int64_t c = c0; c < c1; ++c) e[c] += d[c];
    }
  });
}

namespace {

template <typename T>
void rmsnorm_row(T* o, T* rstd, const T* x, const T* weight, int64_t C, double eps) {
  T sum_sq = 0;
  for (int64_t c = 0; c < C; ++c) sum_sq += x[c] * x[c];
  const T s = static_cast<T>(1) / std::sqrt(sum_sq / static_cast<T>(C) + static_cast<T>(eps));
  for (int64_t c = 0; c < C; ++c) o[c] = weight[c] * (x[c] * s);
  *rstd = s;
}

}  // namespace

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                     double eps) {
  for_blocks(N, kRowBlock, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      rmsnorm_row(out + r * C, rstd + r, inp + r * C, weight, C, eps);
  });
}

void rmsnorm_forward_bf16(uint16_t* out, float* rstd, const float* inp, const float* weight,
                          int64_t N, int64_t C, double eps) {
  for_blocks(N, kRowBlock, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> row;
    if (row.size() < static_cast<size_t>(C)) row.resize(static_cast<size_t>(C));
    for (int64_t r = r0; r < r1; ++r) {
      rmsnorm_row(row.data(), rstd + r, inp + r * C, weight, C, eps);
      transformer::cpu::round_to_bf16_serial(out + r * C, row.data(), C);
    }
  });
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int64_t N, int64_t C) {
  // y = w * x r, r = (mean(x^2) + eps)^-1/2: with g = w dy and xhat = x r,
  // dx = r (g - xhat mean(g xhat)); dw += dy xhat. Per block of rows the
  // weight gradient's partial sum, added block after block (a fixed order).
  const int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
  std::vector<T> partial(static_cast<size_t>(blocks * C), T{0});
  for_blocks(N, kRowBlock, [&](int64_t r0, int64_t r1) {
    T* pw = partial.data() + (r0 / kRowBlock) * C;
    for (int64_t r = r0; r < r1; ++r) {
      const T* x = inp + r * C;
      const T* d = dout + r * C;
      const T s = rstd[r];
      T dot = 0;
      for (int64_t c = 0; c < C; ++c) dot += weight[c] * d[c] * (x[c] * s);
      dot /= static_cast<T>(C);
      T* dx = dinp + r * C;
      for (int64_t c = 0; c < C; ++c) {
        const T xhat = x[c] * s;
        dx[c] += s * (weight[c] * d[c] - xhat * dot);
        pw[c] += d[c] * xhat;
      }
    }
  });
  for_blocks(C, 256, [&](int64_t c0, int64_t c1) {
    for (int64_t b = 0; b < blocks; ++b) {
      const T* pw = partial.data() + b * C;
      for (int64_t c = c0; c < c1; ++c) dweight[c] += pw[c];
    }
  });
}

namespace {

// One rotation per (row, head); sign +1 forward, -1 backward (the inverse
// rotation is the transpose).
template <typename T>
void rotate(T* x, const T* cos, const T* sin, int64_t B, int64_t Tn, int64_t heads,
            int64_t head_dim, int64_t ld, T sign) {
  const int64_t half = head_dim / 2;
  for_blocks(B * Tn, kRowBlock, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* c = cos + (r % Tn) * half;
      const T* s = sin + (r % Tn) * half;
      for (int64_t h = 0; h < heads; ++h) {
        T* lo = x + r * ld + h * head_dim;
        T* hi = lo + half;
        for (int64_t i = 0; i < half; ++i) {
          const T a = lo[i], b = hi[i], si = sign * s[i];
          lo[i] = a * c[i] - b * si;
          hi[i] = b * c[i] + a * si;
        }
      }
    }
  });
}

}  // namespace

template <typename T>
void rope_forward(T* x, const T* cos, const T* sin, int64_t B, int64_t Tn, int64_t heads,
                  int64_t head_dim, int64_t ld) {
  rotate(x, cos, sin, B, Tn, heads, head_dim, ld, T{1});
}

template <typename T>
void rope_backward(T* dx, const T* cos, const T* sin, int64_t B, int64_t Tn, int64_t heads,
                   int64_t head_dim, int64_t ld) {
  rotate(dx, cos, sin, B, Tn, heads, head_dim, ld, T{-1});
}

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
  for_blocks(n, kElementBlock, [&](int64_t i0, int64_t i1) {
    if constexpr (std::is_same_v<T, float>) {
      transformer::cpu::silu_mul_f32(out + i0, gate + i0, up + i0, i1 - i0);
    } else {
      for (int64_t i = i0; i < i1; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
    }
  });
}

void swiglu_forward_bf16(uint16_t* out, const float* gate, const float* up, int64_t n) {
  constexpr int64_t kChunk = 1024;  // the fp32 values stay in L1 until rounded
  for_blocks(n, kElementBlock, [&](int64_t i0, int64_t i1) {
    float values[kChunk];
    for (int64_t i = i0; i < i1; i += kChunk) {
      const int64_t len = std::min(kChunk, i1 - i);
      transformer::cpu::silu_mul_f32(values, gate + i, up + i, len);
      transformer::cpu::round_to_bf16_serial(out + i, values, len);
    }
  });
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  // dup = silu(gate) dout first: dgate may be dout's buffer.
  for_blocks(n, kElementBlock, [&](int64_t i0, int64_t i1) {
    if constexpr (std::is_same_v<T, float>) {
      transformer::cpu::silu_mul_f32(dup + i0, gate + i0, dout + i0, i1 - i0);
      for (int64_t i = i0; i < i1; ++i) dgate[i] = dout[i] * up[i];
      transformer::cpu::silu_grad_mul_f32(dgate + i0, gate + i0, dgate + i0, i1 - i0);
    } else {
      for (int64_t i = i0; i < i1; ++i) {
        const T s = sigmoid(gate[i]), d = dout[i];
        dup[i] = gate[i] * s * d;
        dgate[i] = d * up[i] * s * (static_cast<T>(1) + gate[i] * (static_cast<T>(1) - s));
      }
    }
  });
}

void swiglu_backward_bf16_rows(uint16_t* dgate, uint16_t* dup, float* dout_rows, const float* gate,
                               const float* up, int64_t r0, int64_t r1, int64_t I) {
  constexpr int64_t kChunk = 1024;  // dup's fp32 values stay in L1 until rounded
  const int64_t at = r0 * I, n = (r1 - r0) * I;
  float values[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    float* d = dout_rows + i;
    const float* g = gate + at + i;
    const float* u = up + at + i;
    // gate and up come from memory (the forward wrote them): two chunks
    // ahead asked for now (transformer::cpu::prefetch_floats).
    if (i + 2 * kChunk < n) {
      const int64_t ahead = std::min(kChunk, n - i - 2 * kChunk);
      transformer::cpu::prefetch_floats(g + 2 * kChunk, ahead);
      transformer::cpu::prefetch_floats(u + 2 * kChunk, ahead);
    }
    transformer::cpu::silu_mul_f32(values, g, d, len);
    transformer::cpu::round_to_bf16_serial(dup + at + i, values, len);
    for (int64_t k = 0; k < len; ++k) d[k] *= u[k];
    transformer::cpu::silu_grad_mul_f32(d, g, d, len);
    transformer::cpu::round_to_bf16_serial(dgate + at + i, d, len);
  }
}

#define DSCORE_LLAMA_INSTANTIATE(T)                                                            \
  template void embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t, int64_t,  \
                                     int64_t);                                                 \
  template void embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, \
                                      int64_t);                                                \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, double);      \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t,   \
                                    int64_t);                                                  \
  template void rope_forward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,    \
                                int64_t);                                                      \
  template void rope_backward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,   \
                                 int64_t);                                                     \
  template void swiglu_forward<T>(T*, const T*, const T*, int64_t);                            \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, int64_t);

DSCORE_LLAMA_INSTANTIATE(float)
DSCORE_LLAMA_INSTANTIATE(double)
#undef DSCORE_LLAMA_INSTANTIATE

}  // namespace dscore::llama::cpu
