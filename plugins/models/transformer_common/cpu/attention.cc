#include "attention.h"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "attention_tiles.h"
#include "gemm.h"
#include "isa_target.h"
#include "parallel.h"
#include "vector_math.h"

namespace dscore::transformer::cpu {
namespace attention_tiles {
namespace {

// exp(x) for x <= 0 (scores minus their row max or logsumexp), written so
// the compiler vectorizes the loops calling it (std::exp is a libm call per
// element): 2^n e^r with n = round(x / ln 2), |r| <= ln 2 / 2 and e^r by its
// Taylor series to degree 6 (relative error below 3e-7, 2 ulp). x below -87
// (and -inf, NaN) is taken as -87, about 2^-126: nothing next to the row's
// largest term, 1. The clamp compares the bits as unsigned integers (every
// float above -87 has smaller bits), as a float compare would stop GCC from
// vectorizing the loop under its default -ftrapping-math. double (the
// gradient checks) uses std::exp.
DSCORE_ALWAYS_INLINE float exp_nonpositive(float x) {
  x = std::bit_cast<float>(std::min(std::bit_cast<uint32_t>(x), std::bit_cast<uint32_t>(-87.0f)));
  constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}
DSCORE_ALWAYS_INLINE double exp_nonpositive(double x) { return std::exp(x); }

// Row reductions over kLanes interleaved partial results (lane l takes the
// elements c with c % kLanes == l), combined in lane order at the end: the
// compiler turns each step into vector operations, and the result has the
// same bits whatever the vector width (the build's baseline, AVX2 or
// AVX-512), as each lane adds in the same order.
constexpr int kLanes = 16;

template <typename T, typename Step>
DSCORE_ALWAYS_INLINE void over_lanes(T (&lane)[kLanes], int64_t n, Step&& step) {
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int l = 0; l < kLanes; ++l) step(lane[l], c + l);
  for (int l = 0; c + l < n; ++l) step(lane[l], c + l);
}

template <typename T>
DSCORE_ALWAYS_INLINE T row_max_of(const T* p, int64_t n, T init) {
  T lane[kLanes];
  std::fill(lane, lane + kLanes, init);
  over_lanes(lane, n, [&](T& m, int64_t c) DSCORE_LAMBDA_INLINE { m = p[c] > m ? p[c] : m; });
  T mx = init;
  for (T m : lane) mx = m > mx ? m : mx;
  return mx;
}

template <typename T>
DSCORE_ALWAYS_INLINE T row_dot(const T* a, const T* b, int64_t n) {
  T lane[kLanes] = {};
  over_lanes(lane, n, [&](T& s, int64_t c) DSCORE_LAMBDA_INLINE { s += a[c] * b[c]; });
  T sum = 0;
  for (T s : lane) sum += s;
  return sum;
}

template <typename T>
DSCORE_ALWAYS_INLINE T row_sum(const T* p, int64_t n) {
  T lane[kLanes] = {};
  over_lanes(lane, n, [&](T& s, int64_t c) DSCORE_LAMBDA_INLINE { s += p[c]; });
  T sum = 0;
  for (T s : lane) sum += s;
  return sum;
}

template <typename T>
DSCORE_ALWAYS_INLINE void forward_tile_generic(const ForwardTile<T>& t) {
  for (int64_t r = 0; r < t.rows; ++r) {
    // Keys j0 .. i0 + r are visible to query i0 + r; key block 0 always
    // holds one, so the running max is finite from the first block on.
    const int64_t visible = std::clamp<int64_t>(t.i0 + r - t.j0 + 1, 0, t.cols);
    T* p = t.s + r * t.cols;
    const T mx = row_max_of(p, visible, t.row_max[r]);
    for (int64_t c = 0; c < visible; ++c) p[c] = exp_nonpositive(p[c] - mx);
    const T sum = row_sum(p, visible);
    std::fill(p + visible, p + t.cols, T{0});
    if (t.j0 > 0) {  // rescale what earlier key blocks added
      const T correction = exp_nonpositive(t.row_max[r] - mx);
      T* orow = t.o + r * t.o_ld;
      for (int64_t c = 0; c < t.hs; ++c) orow[c] *= correction;
      t.row_sum[r] = t.row_sum[r] * correction + sum;
    } else {
      t.row_sum[r] = sum;
    }
    t.row_max[r] = mx;
  }
}

template <typename T>
DSCORE_ALWAYS_INLINE void probabilities_generic(const BackwardTile<T>& t) {
  for (int64_t r = 0; r < t.rows; ++r) {
    const int64_t visible = std::clamp<int64_t>(t.i0 + r - t.j0 + 1, 0, t.cols);
    T* prow = t.p + r * t.cols;
    const T m = t.lse[r];
    for (int64_t c = 0; c < visible; ++c) prow[c] = exp_nonpositive(prow[c] - m);
    std::fill(prow + visible, prow + t.cols, T{0});
  }
}

template <typename T>
DSCORE_ALWAYS_INLINE void score_grads_generic(const BackwardTile<T>& t) {
  for (int64_t r = 0; r < t.rows; ++r) {
    const T di = t.d[r];
    const T* prow = t.p + r * t.cols;
    T* row = t.dp + r * t.cols;
    for (int64_t c = 0; c < t.cols; ++c) row[c] = prow[c] * (row[c] - di);
  }
}

template <typename T>
DSCORE_ALWAYS_INLINE void row_dots_generic(const RowDots<T>& t) {
  for (int64_t r = 0; r < t.rows; ++r) t.d[r] = row_dot(t.dy + r * t.ld, t.y + r * t.ld, t.hs);
}

}  // namespace

// Each piece once per ISA; vector_isa() picks (the same bits on each).
#define DSCORE_ATTENTION_PIECE(NAME, ARG)                                      \
  namespace {                                                                  \
  void NAME##_baseline(const ARG<float>& t) { NAME##_generic(t); }             \
  DSCORE_AVX2 void NAME##_avx2(const ARG<float>& t) { NAME##_generic(t); }     \
  DSCORE_AVX512 void NAME##_avx512(const ARG<float>& t) { NAME##_generic(t); } \
  }                                                                            \
  void (*NAME##_for(VectorIsa isa))(const ARG<float>&) {                       \
    return isa == VectorIsa::kAvx512 ? NAME##_avx512                           \
           : isa == VectorIsa::kAvx2 ? NAME##_avx2                             \
                                     : NAME##_baseline;                        \
  }
DSCORE_ATTENTION_PIECE(forward_tile, ForwardTile)
DSCORE_ATTENTION_PIECE(probabilities, BackwardTile)
DSCORE_ATTENTION_PIECE(score_grads, BackwardTile)
DSCORE_ATTENTION_PIECE(row_dots, RowDots)
#undef DSCORE_ATTENTION_PIECE

namespace {

// The pieces for T: the ISA's for float, the generic ones for double.
template <typename T>
struct Pieces {
  explicit Pieces(VectorIsa) {}
  void (*forward_tile)(const ForwardTile<T>&) = forward_tile_generic<T>;
  void (*probabilities)(const BackwardTile<T>&) = probabilities_generic<T>;
  void (*score_grads)(const BackwardTile<T>&) = score_grads_generic<T>;
  void (*row_dots)(const RowDots<T>&) = row_dots_generic<T>;
};
template <>
struct Pieces<float> {
  explicit Pieces(VectorIsa isa)
      : forward_tile(forward_tile_for(isa)),
        probabilities(probabilities_for(isa)),
        score_grads(score_grads_for(isa)),
        row_dots(row_dots_for(isa)) {}
  void (*forward_tile)(const ForwardTile<float>&);
  void (*probabilities)(const BackwardTile<float>&);
  void (*score_grads)(const BackwardTile<float>&);
  void (*row_dots)(const RowDots<float>&);
};

}  // namespace
}  // namespace attention_tiles

namespace {

using attention_tiles::BackwardTile;
using attention_tiles::ForwardTile;
using attention_tiles::Pieces;
using attention_tiles::RowDots;

constexpr int64_t kQb = kAttentionQueryBlock, kKb = kAttentionKeyBlock;
// The backward's first write of a dk/dv block is its diagonal tile, which
// spans the whole key block only when the blocks are equal.
static_assert(kQb == kKb, "attention_backward writes dk and dv first on the diagonal tile");

}  // namespace

template <typename T>
void attention_forward(T* out, T* lse, const T* q_all, const T* k_all, const T* v_all,
                       const AttentionShape& shape, VectorIsa isa) {
  const int64_t Tn = shape.Tn, NH = shape.NH, hs = shape.head_dim, q_blocks = blocks_of(Tn, kQb);
  const int64_t group = NH / shape.NKV, q_ld = shape.q_ld, kv_ld = shape.kv_ld, o_ld = shape.out_ld;
  const T scale = static_cast<T>(1) / std::sqrt(static_cast<T>(hs));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const Pieces<T> pieces(isa);
  // Per task: scores (kQb, kKb), then the running max and sum of each row.
  tbb::enumerable_thread_specific<std::vector<T>> scratch(static_cast<size_t>(kQb * kKb + 2 * kQb),
                                                          T{0});
  tbb::parallel_for(int64_t{0}, shape.B * NH * q_blocks, [&](int64_t task) {
    const int64_t bh = task / q_blocks, i0 = (task % q_blocks) * kQb;
    const int64_t b = bh / NH, h = bh % NH, rows = std::min(kQb, Tn - i0);
    const T* q = q_all + (b * Tn + i0) * q_ld + h * hs;
    const T* k = k_all + b * Tn * kv_ld + (h / group) * hs;
    const T* v = v_all + b * Tn * kv_ld + (h / group) * hs;
    T* o = out + (b * Tn + i0) * o_ld + h * hs;  // the output accumulates in place
    T* s = scratch.local().data();
    T* row_max = s + kQb * kKb;
    T* row_sum = row_max + kQb;
    std::fill(row_max, row_max + rows, neg_inf);
    std::fill(row_sum, row_sum + rows, T{0});
    // Key blocks up to the last query row: the ones above the diagonal are skipped.
    for (int64_t j0 = 0; j0 < i0 + rows; j0 += kKb) {
      const int64_t cols = std::min(kKb, i0 + rows - j0);
      gemm_serial<T>(Op::kNone, Op::kTranspose, rows, cols, hs, scale, q, q_ld, k + j0 * kv_ld,
                     kv_ld, T{0}, s, cols);
      pieces.forward_tile({s, row_max, row_sum, o, o_ld, rows, cols, hs, i0, j0});
      gemm_serial<T>(Op::kNone, Op::kNone, rows, hs, cols, T{1}, s, cols, v + j0 * kv_ld, kv_ld,
                     j0 == 0 ? T{0} : T{1}, o, o_ld);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T inv = static_cast<T>(1) / row_sum[r];
      T* orow = o + r * o_ld;
      for (int64_t c = 0; c < hs; ++c) orow[c] *= inv;
      lse[bh * Tn + i0 + r] = row_max[r] + std::log(row_sum[r]);
    }
  });
}

template <typename T>
void attention_backward(T* dq_all, T* dk_all, T* dv_all, const T* dout, const T* q_all,
                        const T* k_all, const T* v_all, const T* out, const T* lse,
                        const AttentionShape& shape, VectorIsa isa) {
  const int64_t Tn = shape.Tn, NH = shape.NH, NKV = shape.NKV, hs = shape.head_dim;
  const int64_t group = NH / NKV, q_ld = shape.q_ld, kv_ld = shape.kv_ld, o_ld = shape.out_ld;
  const T scale = static_cast<T>(1) / std::sqrt(static_cast<T>(hs));
  const Pieces<T> pieces(isa);
  // Per task: probabilities and their gradient (kQb, kKb) each, then
  // D (T) = rowsum(dout * out), the softmax backward's row term.
  tbb::enumerable_thread_specific<std::vector<T>> scratch;
  tbb::parallel_for(int64_t{0}, shape.B * NKV, [&](int64_t bg) {
    const int64_t b = bg / NKV, g = bg % NKV;
    const T* k_head = k_all + b * Tn * kv_ld + g * hs;
    const T* v_head = v_all + b * Tn * kv_ld + g * hs;
    T* dk = dk_all + b * Tn * kv_ld + g * hs;
    T* dv = dv_all + b * Tn * kv_ld + g * hs;
    std::vector<T>& buffer = scratch.local();
    buffer.resize(static_cast<size_t>(2 * kQb * kKb + Tn));
    T* p = buffer.data();
    T* dp = p + kQb * kKb;
    T* d = dp + kQb * kKb;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const T* q_head = q_all + b * Tn * q_ld + h * hs;
      T* dq = dq_all + b * Tn * q_ld + h * hs;
      const T* dy = dout + b * Tn * o_ld + h * hs;
      const T* y = out + b * Tn * o_ld + h * hs;
      const T* row_lse = lse + (b * NH + h) * Tn;
      pieces.row_dots({d, dy, y, o_ld, Tn, hs});
      for (int64_t i0 = 0; i0 < Tn; i0 += kQb) {
        const int64_t rows = std::min(kQb, Tn - i0);
        const T* q = q_head + i0 * q_ld;
        const T* dyi = dy + i0 * o_ld;
        for (int64_t j0 = 0; j0 < i0 + rows; j0 += kKb) {
          const int64_t cols = std::min(kKb, i0 + rows - j0);
          const T* k = k_head + j0 * kv_ld;
          const T* v = v_head + j0 * kv_ld;
          // P = exp(scale Q K^T - lse), zero above the diagonal.
          gemm_serial<T>(Op::kNone, Op::kTranspose, rows, cols, hs, scale, q, q_ld, k, kv_ld, T{0},
                         p, cols);
          const BackwardTile<T> tile{p, dp, row_lse + i0, d + i0, rows, cols, i0, j0};
          pieces.probabilities(tile);
          // dV += P^T dY; dP = dY V^T; dS = P (dP - D); dQ += scale dS K; dK += scale dS^T Q.
          // The first tile to reach a block of dq (key block 0) or of dk
          // and dv (the group's first head, on the diagonal, where
          // equal query and key blocks cover the whole key block) writes
          // it (beta 0) instead of adding to zeros filled before.
          const T kv_beta = h == g * group && j0 == i0 ? T{0} : T{1};
          gemm_serial<T>(Op::kTranspose, Op::kNone, cols, hs, rows, T{1}, p, cols, dyi, o_ld,
                         kv_beta, dv + j0 * kv_ld, kv_ld);
          gemm_serial<T>(Op::kNone, Op::kTranspose, rows, cols, hs, T{1}, dyi, o_ld, v, kv_ld, T{0},
                         dp, cols);
          pieces.score_grads(tile);
          gemm_serial<T>(Op::kNone, Op::kNone, rows, hs, cols, scale, dp, cols, k, kv_ld,
                         j0 == 0 ? T{0} : T{1}, dq + i0 * q_ld, q_ld);
          gemm_serial<T>(Op::kTranspose, Op::kNone, cols, hs, rows, scale, dp, cols, q, q_ld,
                         kv_beta, dk + j0 * kv_ld, kv_ld);
        }
      }
    }
  });
}

#define DSCORE_ATTENTION_INSTANTIATE(T)                                                           \
  template void attention_forward<T>(T*, T*, const T*, const T*, const T*, const AttentionShape&, \
                                     VectorIsa);                                                  \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,         \
                                      const T*, const T*, const AttentionShape&, VectorIsa);
DSCORE_ATTENTION_INSTANTIATE(float)
DSCORE_ATTENTION_INSTANTIATE(double)
#undef DSCORE_ATTENTION_INSTANTIATE

}  // namespace dscore::transformer::cpu
