#include "kernels.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "gemm.h"
#include "vector_math.h"

namespace dscore::gpt::cpu {
namespace {

// Calls fn(begin, end) for fixed blocks of [0, n) in parallel. Fixed blocks
// keep every reduction order independent of the thread count.
template <typename Fn>
void for_blocks(int64_t n, int64_t block, Fn&& fn) {
  const int64_t blocks = (n + block - 1) / block;
  if (blocks <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(int64_t{0}, blocks,
                    [&](int64_t b) { fn(b * block, std::min(n, (b + 1) * block)); });
}

constexpr int64_t kRowBlock = 16;  // rows per task for row-wise kernels
constexpr int64_t kElementBlock = 1 << 14;
constexpr double kLayerNormEps = 1e-5;

template <typename T>
T gelu_scale() {
  return static_cast<T>(0.7978845608028654);
}  // sqrt(2/pi)

}  // namespace

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t Tn, int64_t C) {
  for_blocks(B * Tn, kRowBlock, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int32_t token = tokens[r] < 0 ? 0 : tokens[r];
      const T* e = wte + token * C;
      const T* p = wpe + (r % Tn) * C;
      T* o = out + r * C;
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  });
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t Tn,
                      int64_t C) {
  // Parallel over channel blocks: each task owns its columns of dwte and
  // dwpe, and adds rows in order (no races, fixed order).
  for_blocks(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < B * Tn; ++r) {
      const int32_t token = tokens[r] < 0 ? 0 : tokens[r];
      const T* d = dout + r * C;
      T* e = dwte + token * C;
      T* p = dwpe + (r % Tn) * C;
      for (int64_t c = c0; c < c1; ++c) {
        e[c] += d[c];
        p[c] += d[c];
      }
    }
  });
}

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C) {
  for_blocks(N, kRowBlock, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* x = inp + r * C;
      T m = 0;
      for (int64_t c = 0; c < C; ++c) m += x[c];
      m /= static_cast<T>(C);
      T v = 0;
      for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
      v /= static_cast<T>(C);
      const T s = static_cast<T>(1) / std::sqrt(v + static_cast<T>(kLayerNormEps));
      T* o = out + r * C;
      for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
      mean[r] = m;
      rstd[r] = s;
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
                     int64_t N, int64_t C, int64_t OC) {
  gemm<T>(Op::kNone, Op::kNone, N, C, OC, T{1}, dout, OC, weight, C, T{0}, dinp, C);
  gemm<T>(Op::kTranspose, Op::kNone, OC, C, N, T{1}, dout, OC, inp, C, T{1}, dweight, C);
  if (dbias == nullptr) return;
  for_blocks(OC, 64, [&](int64_t o0, int64_t o1) {
    for (int64_t r = 0; r < N; ++r)
      for (int64_t o = o0; o < o1; ++o) dbias[o] += dout[r * OC + o];
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

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for_blocks(n, kElementBlock, [&](int64_t i0, int64_t i1) {
      gelu_backward_f32(dinp + i0, inp + i0, dout + i0, i1 - i0);
    });
    return;
  }
  const T s = gelu_scale<T>();
  for_blocks(n, kElementBlock, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T x = inp[i];
      const T u = s * (x + static_cast<T>(0.044715) * x * x * x);
      const T th = std::tanh(u);
      const T sech2 = static_cast<T>(1) - th * th;
      const T du = s * (static_cast<T>(1) + static_cast<T>(3 * 0.044715) * x * x);
      const T grad =
          static_cast<T>(0.5) * (static_cast<T>(1) + th) + static_cast<T>(0.5) * x * sech2 * du;
      dinp[i] = grad * dout[i];
    }
  });
}

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n) {
  for_blocks(n, kElementBlock, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  });
}

namespace {

// Rows of logits per block: about 4M logits (16 MiB in fp32) at a time.
int64_t lm_rows_per_block(int64_t N, int64_t V) {
  return std::clamp<int64_t>((int64_t{1} << 22) / std::max<int64_t>(V, 1), 16,
                             std::max<int64_t>(N, 16));
}

// Softmax of each row of logits (rows x V) in place; returns per-row
// log-sum-exp through lse.
template <typename T>
void softmax_rows(T* logits, int64_t rows, int64_t V, double* lse) {
  for_blocks(rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* z = logits + r * V;
      T mx = z[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, z[v]);
      T sum = 0;
      for (int64_t v = 0; v < V; ++v) {
        z[v] = std::exp(z[v] - mx);
        sum += z[v];
      }
      const T inv = static_cast<T>(1) / sum;
      for (int64_t v = 0; v < V; ++v) z[v] *= inv;
      lse[r] = static_cast<double>(mx) + std::log(static_cast<double>(sum));
    }
  });
}

}  // namespace

template <typename T>
double lm_head_forward_backward(T* dx, T* dwte, const T* x, const T* wte, const int32_t* targets,
                                int64_t N, int64_t C, int64_t V, double grad_scale) {
  const int64_t rb = lm_rows_per_block(N, V);
  std::vector<T> logits(static_cast<size_t>(rb * V));
  std::vector<double> lse(static_cast<size_t>(rb));
  std::vector<double> row_loss(static_cast<size_t>(rb));
  double loss = 0;
  for (int64_t r0 = 0; r0 < N; r0 += rb) {
    const int64_t rows = std::min(rb, N - r0);
    gemm<T>(Op::kNone, Op::kTranspose, rows, V, C, T{1}, x + r0 * C, C, wte, C, T{0}, logits.data(),
            V);
    // Target logit before the softmax overwrites it.
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t y = targets[r0 + r];
      row_loss[r] = y < 0 ? 0.0 : -static_cast<double>(logits[r * V + y]);
    }
    softmax_rows(logits.data(), rows, V, lse.data());
    for_blocks(rows, 4, [&](int64_t a, int64_t b) {  // dlogits = scale * (p - onehot)
      for (int64_t r = a; r < b; ++r) {
        T* z = logits.data() + r * V;
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
    gemm<T>(Op::kNone, Op::kNone, rows, C, V, T{1}, logits.data(), V, wte, C, T{0}, dx + r0 * C, C);
    gemm<T>(Op::kTranspose, Op::kNone, V, C, rows, T{1}, logits.data(), V, x + r0 * C, C, T{1},
            dwte, C);
  }
  return loss;
}

template <typename T>
double lm_head_forward(const T* x, const T* wte, const int32_t* targets, int64_t N, int64_t C,
                       int64_t V, const int64_t* rows, int64_t n_rows, float* logits_out) {
  double loss = 0;
  std::vector<T> logits;
  if (targets != nullptr) {
    const int64_t rb = lm_rows_per_block(N, V);
    logits.resize(static_cast<size_t>(rb * V));
    std::vector<double> lse(static_cast<size_t>(rb));
    for (int64_t r0 = 0; r0 < N; r0 += rb) {
      const int64_t count = std::min(rb, N - r0);
      gemm<T>(Op::kNone, Op::kTranspose, count, V, C, T{1}, x + r0 * C, C, wte, C, T{0},
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
      gemm<T>(Op::kNone, Op::kTranspose, 1, V, C, T{1}, x + rows[i] * C, C, wte, C, T{0},
              logits.data(), V);
      for (int64_t v = 0; v < V; ++v) logits_out[i * V + v] = static_cast<float>(logits[v]);
    }
  }
  return loss;
}

#define DSCORE_GPT_INSTANTIATE(T)                                                                  \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,       \
                                   int64_t);                                                       \
  template void encoder_backward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t);  \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t);  \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,          \
                                      const T*, int64_t, int64_t);                                 \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);    \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t,     \
                                   int64_t);                                                       \
  template void gelu_forward<T>(T*, const T*, int64_t);                                            \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);                                 \
  template void add<T>(T*, const T*, const T*, int64_t);                                           \
  template double lm_head_forward_backward<T>(T*, T*, const T*, const T*, const int32_t*, int64_t, \
                                              int64_t, int64_t, double);                           \
  template double lm_head_forward<T>(const T*, const T*, const int32_t*, int64_t, int64_t,         \
                                     int64_t, const int64_t*, int64_t, float*);

DSCORE_GPT_INSTANTIATE(float)
DSCORE_GPT_INSTANTIATE(double)
#undef DSCORE_GPT_INSTANTIATE

}  // namespace dscore::gpt::cpu
