// Fused causal attention (flash_attention.h). Every kernel works on tiles of
// 64 query rows and 64 key rows with 4 warps; warp w owns 16 rows of each
// tile product, computed with 16 x 16 x 16 bf16 WMMA fragments into fp32.
// Fragments go through shared memory wherever a row-wise step follows (the
// softmax, the mask), so nothing depends on how a fragment spreads over the
// lanes. Head channels past head_dim are zero in shared memory and never
// stored.
#include <mma.h>

#include <initializer_list>
#include <type_traits>

#include "device_math.cuh"
#include "flash_attention.h"

namespace dscore::transformer::gpu {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kTile = 64;  // query rows and key rows per tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kWarpRows = kTile / kWarps;  // 16: one fragment's rows
constexpr int kKeyFrags = kTile / 16;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragATransposed = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBTransposed = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Leading dimensions in shared memory (elements), padded against bank
// conflicts; a fragment starting at a row and column that are multiples of
// 16 stays 32-byte aligned, as WMMA loads and stores require.
template <int Dp>
struct Ld {
  static constexpr int kHead = Dp + 8;      // bf16 (64, Dp): q, k, v, dout tiles
  static constexpr int kScore = kTile + 4;  // fp32 (64, 64): scores, dP
  static constexpr int kProb = kTile + 8;   // bf16 (64, 64): P, dS
  static constexpr int kOut = Dp + 4;       // fp32 (64, Dp): output rows, staging
  static constexpr int kHeadBytes = kTile * kHead * 2;
  static constexpr int kScoreBytes = kTile * kScore * 4;
  static constexpr int kProbBytes = kTile * kProb * 2;
  static constexpr int kOutBytes = kTile * kOut * 4;
  static constexpr int kRowBytes = kTile * 4;
  // Staging of 64 fp32 output rows reuses the two score tiles.
  static_assert(kOutBytes <= 2 * kScoreBytes, "staging does not fit the score tiles");
};

template <int Dp>
constexpr int forward_smem_bytes() {
  using L = Ld<Dp>;
  return 3 * L::kHeadBytes + L::kScoreBytes + L::kProbBytes + L::kOutBytes;
}

template <int Dp>
constexpr int backward_smem_bytes() {
  using L = Ld<Dp>;
  return 4 * L::kHeadBytes + 2 * L::kScoreBytes + 2 * L::kProbBytes + 2 * L::kRowBytes;
}

// dst (64, Dp) = rows [t0, t0 + 64) of src (row stride ld, `D` channels);
// rows at or past T and channels past D are zero. `vec`: D == Dp and every
// row 16-byte aligned, loaded 8 elements at a time.
template <int Dp>
__device__ void load_tile(bf16* dst, const bf16* src, int64_t ld, int t0, int T, int D, bool vec) {
  constexpr int ldh = Ld<Dp>::kHead;
  if (vec) {
    constexpr int per_row = Dp / 8;
    for (int idx = threadIdx.x; idx < kTile * per_row; idx += kThreads) {
      const int r = idx / per_row, c = (idx % per_row) * 8;
      uint4 value = make_uint4(0u, 0u, 0u, 0u);
      if (t0 + r < T)
        value = *reinterpret_cast<const uint4*>(src + static_cast<int64_t>(t0 + r) * ld + c);
      *reinterpret_cast<uint4*>(dst + r * ldh + c) = value;
    }
    return;
  }
  for (int idx = threadIdx.x; idx < kTile * Dp; idx += kThreads) {
    const int r = idx / Dp, c = idx % Dp;
    bf16 value = __float2bfloat16_rn(0.0f);
    if (t0 + r < T && c < D) value = src[static_cast<int64_t>(t0 + r) * ld + c];
    dst[r * ldh + c] = value;
  }
}

// row_stats[r] = src[t0 + r] for t0 + r < T, else 0 (64 rows).
__device__ void load_rows(float* row_stats, const float* src, int t0, int T) {
  for (int r = threadIdx.x; r < kTile; r += kThreads)
    row_stats[r] = t0 + r < T ? src[t0 + r] : 0.0f;
}

// dst (16, 64) fp32 = a (16, Dp) times b (64, Dp) transposed: a warp's 16
// rows of a tile's scores (or of dP = dout v^T).
template <int Dp>
__device__ void product_abt(float* dst, const bf16* a, const bf16* b) {
  using L = Ld<Dp>;
#pragma unroll
  for (int j = 0; j < kKeyFrags; ++j) {
    FragC c;
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int kk = 0; kk < Dp / 16; ++kk) {
      FragA fa;
      FragBTransposed fb;
      wmma::load_matrix_sync(fa, a + kk * 16, L::kHead);
      wmma::load_matrix_sync(fb, b + j * 16 * L::kHead + kk * 16, L::kHead);
      wmma::mma_sync(c, fa, fb, c);
    }
    wmma::store_matrix_sync(dst + j * 16, c, L::kScore, wmma::mem_row_major);
  }
}

// acc[n] (16, 16) += a (16, 64) times b (64, Dp)'s column block n, with a
// the warp's 16 rows of a (64, 64) bf16 tile (ld kProb), or with
// `transposed` the tile's 16 columns at `a`, read as rows.
template <int Dp, bool transposed>
__device__ void accumulate_ab(FragC (&acc)[Dp / 16], const bf16* a, const bf16* b) {
  using L = Ld<Dp>;
#pragma unroll
  for (int kk = 0; kk < kKeyFrags; ++kk) {
    using FragLeft = std::conditional_t<transposed, FragATransposed, FragA>;
    FragLeft fa;
    wmma::load_matrix_sync(fa, transposed ? a + kk * 16 * L::kProb : a + kk * 16, L::kProb);
#pragma unroll
    for (int n = 0; n < Dp / 16; ++n) {
      FragB fb;
      wmma::load_matrix_sync(fb, b + kk * 16 * L::kHead + n * 16, L::kHead);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes the warp's 16 rows of acc times `factor` to dst rows t0 .. t0 + 15
// (D channels, row stride ld; rows at or past T skipped), through `stage`
// (16 fp32 rows of ld kOut that only this warp uses).
template <int Dp>
__device__ void store_rows(bf16* dst, int64_t ld, int t0, int T, int D, FragC (&acc)[Dp / 16],
                           float factor, float* stage) {
  using L = Ld<Dp>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < Dp / 16; ++n) {
    for (int e = 0; e < acc[n].num_elements; ++e) acc[n].x[e] *= factor;
    wmma::store_matrix_sync(stage + n * 16, acc[n], L::kOut, wmma::mem_row_major);
  }
  __syncwarp();
  for (int r = 0; r < kWarpRows; ++r) {
    if (t0 + r >= T) break;
    for (int d = lane; d < D; d += 32)
      dst[static_cast<int64_t>(t0 + r) * ld + d] = __float2bfloat16_rn(stage[r * L::kOut + d]);
  }
  __syncwarp();
}

// Per block: one tile of query rows of one head of one sample, its key
// tiles streamed past it with an online softmax. The last query tiles
// (the most key tiles) start first.
template <int Dp>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                         FlashShape s, float scale, bool vec) {
  using L = Ld<Dp>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* q_tile = reinterpret_cast<bf16*>(smem);
  bf16* k_tile = q_tile + kTile * L::kHead;
  bf16* v_tile = k_tile + kTile * L::kHead;
  float* scores = reinterpret_cast<float*>(v_tile + kTile * L::kHead);
  bf16* probs = reinterpret_cast<bf16*>(scores + kTile * L::kScore);
  float* acc = reinterpret_cast<float*>(probs + kTile * L::kProb);

  const int T = static_cast<int>(s.Tn), D = static_cast<int>(s.head_dim);
  const int qb = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z, g = h / static_cast<int>(s.NH / s.NKV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * kWarpRows;
  const int q0 = qb * kTile;
  const bf16* kh = k + static_cast<int64_t>(b) * T * s.kv_ld + static_cast<int64_t>(g) * D;
  const bf16* vh = v + static_cast<int64_t>(b) * T * s.kv_ld + static_cast<int64_t>(g) * D;

  load_tile<Dp>(q_tile, q + static_cast<int64_t>(b) * T * s.q_ld + static_cast<int64_t>(h) * D,
                s.q_ld, q0, T, D, vec);
  for (int i = threadIdx.x; i < kTile * L::kOut; i += kThreads) acc[i] = 0.0f;
  float row_max[kWarpRows], row_sum[kWarpRows];
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.0f;

  for (int kb = 0; kb <= qb; ++kb) {
    const int k0 = kb * kTile;
    __syncthreads();  // every warp is done with the previous key and value tiles
    load_tile<Dp>(k_tile, kh, s.kv_ld, k0, T, D, vec);
    load_tile<Dp>(v_tile, vh, s.kv_ld, k0, T, D, vec);
    __syncthreads();
    product_abt<Dp>(scores + row0 * L::kScore, q_tile + row0 * L::kHead, k_tile);
    __syncwarp();
    // Every row sees a key it may attend to in every tile (key k0 <= q0),
    // so the running maximum is finite after the first tile.
#pragma unroll
    for (int r = 0; r < kWarpRows; ++r) {
      const int row = row0 + r, i = q0 + row;
      float x[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = lane + 32 * e, j = k0 + c;
        x[e] = j <= i && j < T ? scores[row * L::kScore + c] * scale : -INFINITY;
      }
      const float new_max = fmaxf(row_max[r], warp_max(fmaxf(x[0], x[1])));
      const float rescale = expf(row_max[r] - new_max);  // 0 on the first tile
      float sum = 0.0f;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bf16 p = __float2bfloat16_rn(expf(x[e] - new_max));
        probs[row * L::kProb + lane + 32 * e] = p;
        sum += __bfloat162float(p);  // the sum of what the product uses
      }
      row_sum[r] = row_sum[r] * rescale + warp_sum(sum);
      row_max[r] = new_max;
      for (int d = lane; d < Dp; d += 32) acc[row * L::kOut + d] *= rescale;
    }
    __syncwarp();
#pragma unroll
    for (int n = 0; n < Dp / 16; ++n) {
      FragC c;
      float* rows = acc + row0 * L::kOut + n * 16;
      wmma::load_matrix_sync(c, rows, L::kOut, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kKeyFrags; ++kk) {
        FragA fa;
        FragB fb;
        wmma::load_matrix_sync(fa, probs + row0 * L::kProb + kk * 16, L::kProb);
        wmma::load_matrix_sync(fb, v_tile + kk * 16 * L::kHead + n * 16, L::kHead);
        wmma::mma_sync(c, fa, fb, c);
      }
      wmma::store_matrix_sync(rows, c, L::kOut, wmma::mem_row_major);
    }
  }
  __syncwarp();
  bf16* oh = out + static_cast<int64_t>(b) * T * s.out_ld + static_cast<int64_t>(h) * D;
  float* lh = lse + (static_cast<int64_t>(b) * s.NH + h) * T;
  for (int r = 0; r < kWarpRows; ++r) {
    const int row = row0 + r, i = q0 + row;
    if (i >= T) break;
    const float inv = 1.0f / row_sum[r];
    for (int d = lane; d < D; d += 32)
      oh[static_cast<int64_t>(i) * s.out_ld + d] =
          __float2bfloat16_rn(acc[row * L::kOut + d] * inv);
    if (lane == 0) lh[i] = row_max[r] + logf(row_sum[r]);
  }
}

// row_dots[(b NH + h) T + i] = dout . out over head h's channels of row i;
// one warp per row.
__global__ void row_dots_kernel(float* row_dots, const bf16* dout, const bf16* out, FlashShape s) {
  const int64_t rows = s.B * s.NH * s.Tn;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       row < rows; row += warps) {
    const int64_t i = row % s.Tn, h = row / s.Tn % s.NH, b = row / (s.Tn * s.NH);
    const int64_t at = (b * s.Tn + i) * s.out_ld + h * s.head_dim;
    float dot = 0.0f;
    for (int64_t d = lane; d < s.head_dim; d += 32)
      dot += __bfloat162float(dout[at + d]) * __bfloat162float(out[at + d]);
    dot = warp_sum(dot);
    if (lane == 0) row_dots[row] = dot;
  }
}

// The warp's 16 query rows of one (query tile, key tile) pair: from the
// scores and dP = dout v^T in shared memory, P (when `probs` is not null)
// and dS = P (dP - row_dot), both bf16.
template <int Dp>
__device__ void probabilities_and_grads(bf16* probs, bf16* dscores, const float* scores,
                                        const float* dp, const float* row_lse, const float* row_dot,
                                        int row0, int q0, int k0, int T, float scale) {
  using L = Ld<Dp>;
  const int lane = threadIdx.x % 32;
  for (int r = 0; r < kWarpRows; ++r) {
    const int row = row0 + r, i = q0 + row;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = lane + 32 * e, j = k0 + c;
      const float p =
          i < T && j <= i ? expf(scores[row * L::kScore + c] * scale - row_lse[row]) : 0.0f;
      const float ds = p * (dp[row * L::kScore + c] - row_dot[row]);
      if (probs != nullptr) probs[row * L::kProb + c] = __float2bfloat16_rn(p);
      dscores[row * L::kProb + c] = __float2bfloat16_rn(ds);
    }
  }
}

// The shared memory of both backward kernels.
template <int Dp>
struct BackwardTiles {
  bf16 *k, *v, *q, *dout;
  float *scores, *dp;  // contiguous: 64 fp32 rows of staging at the end
  bf16 *probs, *dscores;
  float *row_lse, *row_dot;

  __device__ explicit BackwardTiles(unsigned char* smem) {
    using L = Ld<Dp>;
    k = reinterpret_cast<bf16*>(smem);
    v = k + kTile * L::kHead;
    q = v + kTile * L::kHead;
    dout = q + kTile * L::kHead;
    scores = reinterpret_cast<float*>(dout + kTile * L::kHead);
    dp = scores + kTile * L::kScore;
    probs = reinterpret_cast<bf16*>(dp + kTile * L::kScore);
    dscores = probs + kTile * L::kProb;
    row_lse = reinterpret_cast<float*>(dscores + kTile * L::kProb);
    row_dot = row_lse + kTile;
  }
};

// dK and dV of one key tile of one key/value head: the group's query heads
// in head order, each over the query tiles at or after the key tile.
template <int Dp>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kv_kernel(bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                             const bf16* v, const float* lse, const float* row_dots, FlashShape s,
                             float scale, bool vec) {
  using L = Ld<Dp>;
  extern __shared__ __align__(128) unsigned char smem[];
  BackwardTiles<Dp> t(smem);
  const int T = static_cast<int>(s.Tn), D = static_cast<int>(s.head_dim);
  const int tiles = static_cast<int>(gridDim.x), kb = blockIdx.x;
  const int g = blockIdx.y, b = blockIdx.z, group = static_cast<int>(s.NH / s.NKV);
  const int warp = threadIdx.x / 32, row0 = warp * kWarpRows, k0 = kb * kTile;
  const int64_t kv_at = static_cast<int64_t>(b) * T * s.kv_ld + static_cast<int64_t>(g) * D;

  load_tile<Dp>(t.k, k + kv_at, s.kv_ld, k0, T, D, vec);
  load_tile<Dp>(t.v, v + kv_at, s.kv_ld, k0, T, D, vec);
  FragC dk_acc[Dp / 16], dv_acc[Dp / 16];
#pragma unroll
  for (int n = 0; n < Dp / 16; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.0f);
    wmma::fill_fragment(dv_acc[n], 0.0f);
  }
  for (int r = 0; r < group; ++r) {
    const int h = g * group + r;
    const int64_t row_at = (static_cast<int64_t>(b) * s.NH + h) * T;
    for (int qb = kb; qb < tiles; ++qb) {
      const int q0 = qb * kTile;
      __syncthreads();  // every warp is done with the previous query tile
      load_tile<Dp>(t.q, q + static_cast<int64_t>(b) * T * s.q_ld + static_cast<int64_t>(h) * D,
                    s.q_ld, q0, T, D, vec);
      load_tile<Dp>(t.dout,
                    dout + static_cast<int64_t>(b) * T * s.out_ld + static_cast<int64_t>(h) * D,
                    s.out_ld, q0, T, D, vec);
      load_rows(t.row_lse, lse + row_at, q0, T);
      load_rows(t.row_dot, row_dots + row_at, q0, T);
      __syncthreads();
      // The warp's 16 query rows of S and dP, then of P and dS.
      product_abt<Dp>(t.scores + row0 * L::kScore, t.q + row0 * L::kHead, t.k);
      product_abt<Dp>(t.dp + row0 * L::kScore, t.dout + row0 * L::kHead, t.v);
      __syncwarp();
      probabilities_and_grads<Dp>(t.probs, t.dscores, t.scores, t.dp, t.row_lse, t.row_dot, row0,
                                  q0, k0, T, scale);
      __syncthreads();  // dV and dK read every warp's rows of P and dS
      // The warp's 16 key rows: dV += P^T dout, dK += dS^T q (scaled at the end).
      accumulate_ab<Dp, true>(dv_acc, t.probs + row0, t.dout);
      accumulate_ab<Dp, true>(dk_acc, t.dscores + row0, t.q);
    }
  }
  __syncthreads();  // staging overwrites the score tiles
  float* stage = t.scores + row0 * L::kOut;
  store_rows<Dp>(dv + kv_at, s.kv_ld, k0 + row0, T, D, dv_acc, 1.0f, stage);
  store_rows<Dp>(dk + kv_at, s.kv_ld, k0 + row0, T, D, dk_acc, scale, stage);
}

// dQ of one query tile of one head: the key tiles up to the diagonal.
template <int Dp>
__global__ void __launch_bounds__(kThreads)
    flash_backward_q_kernel(bf16* dq, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                            const float* lse, const float* row_dots, FlashShape s, float scale,
                            bool vec) {
  using L = Ld<Dp>;
  extern __shared__ __align__(128) unsigned char smem[];
  BackwardTiles<Dp> t(smem);
  const int T = static_cast<int>(s.Tn), D = static_cast<int>(s.head_dim);
  const int qb = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z, g = h / static_cast<int>(s.NH / s.NKV);
  const int warp = threadIdx.x / 32, row0 = warp * kWarpRows, q0 = qb * kTile;
  const int64_t q_at = static_cast<int64_t>(b) * T * s.q_ld + static_cast<int64_t>(h) * D;
  const int64_t kv_at = static_cast<int64_t>(b) * T * s.kv_ld + static_cast<int64_t>(g) * D;
  const int64_t row_at = (static_cast<int64_t>(b) * s.NH + h) * T;

  load_tile<Dp>(t.q, q + q_at, s.q_ld, q0, T, D, vec);
  load_tile<Dp>(t.dout, dout + static_cast<int64_t>(b) * T * s.out_ld + static_cast<int64_t>(h) * D,
                s.out_ld, q0, T, D, vec);
  load_rows(t.row_lse, lse + row_at, q0, T);
  load_rows(t.row_dot, row_dots + row_at, q0, T);
  FragC dq_acc[Dp / 16];
#pragma unroll
  for (int n = 0; n < Dp / 16; ++n) wmma::fill_fragment(dq_acc[n], 0.0f);
  for (int kb = 0; kb <= qb; ++kb) {
    const int k0 = kb * kTile;
    __syncthreads();  // every warp is done with the previous key and value tiles
    load_tile<Dp>(t.k, k + kv_at, s.kv_ld, k0, T, D, vec);
    load_tile<Dp>(t.v, v + kv_at, s.kv_ld, k0, T, D, vec);
    __syncthreads();
    product_abt<Dp>(t.scores + row0 * L::kScore, t.q + row0 * L::kHead, t.k);
    product_abt<Dp>(t.dp + row0 * L::kScore, t.dout + row0 * L::kHead, t.v);
    __syncwarp();
    probabilities_and_grads<Dp>(nullptr, t.dscores, t.scores, t.dp, t.row_lse, t.row_dot, row0, q0,
                                k0, T, scale);
    __syncwarp();
    // The warp's 16 query rows: dQ += dS k (scaled at the end).
    accumulate_ab<Dp, false>(dq_acc, t.dscores + row0 * L::kProb, t.k);
  }
  __syncthreads();  // staging overwrites the score tiles
  store_rows<Dp>(dq + q_at, s.q_ld, q0 + row0, T, D, dq_acc, scale, t.scores + row0 * L::kOut);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Loads 8 elements at a time where the head size fills its padding and
// every row of every operand starts 16-byte aligned.
bool vector_loads(const FlashShape& s, int64_t padded, std::initializer_list<const void*> bases) {
  if (s.head_dim != padded || s.q_ld % 8 != 0 || s.kv_ld % 8 != 0 || s.out_ld % 8 != 0)
    return false;
  for (const void* p : bases)
    if (!aligned16(p)) return false;
  return true;
}

template <typename Kernel>
cudaError_t allow_smem(Kernel kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

float head_scale(const FlashShape& s) { return 1.0f / sqrtf(static_cast<float>(s.head_dim)); }

unsigned int tiles(const FlashShape& s) {
  return static_cast<unsigned int>((s.Tn + kTile - 1) / kTile);
}

template <int Dp>
cudaError_t forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                    const FlashShape& s, cudaStream_t stream) {
  constexpr int bytes = forward_smem_bytes<Dp>();
  if (const cudaError_t e = allow_smem(flash_forward_kernel<Dp>, bytes); e != cudaSuccess) return e;
  const dim3 grid(tiles(s), static_cast<unsigned int>(s.NH), static_cast<unsigned int>(s.B));
  flash_forward_kernel<Dp><<<grid, kThreads, bytes, stream>>>(out, lse, q, k, v, s, head_scale(s),
                                                              vector_loads(s, Dp, {q, k, v}));
  return launched();
}

template <int Dp>
cudaError_t backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                     const bf16* v, const float* lse, const float* row_dots, const FlashShape& s,
                     cudaStream_t stream) {
  constexpr int bytes = backward_smem_bytes<Dp>();
  if (const cudaError_t e = allow_smem(flash_backward_kv_kernel<Dp>, bytes); e != cudaSuccess)
    return e;
  if (const cudaError_t e = allow_smem(flash_backward_q_kernel<Dp>, bytes); e != cudaSuccess)
    return e;
  const bool vec = vector_loads(s, Dp, {q, k, v, dout});
  const float scale = head_scale(s);
  const dim3 kv_grid(tiles(s), static_cast<unsigned int>(s.NKV), static_cast<unsigned int>(s.B));
  flash_backward_kv_kernel<Dp>
      <<<kv_grid, kThreads, bytes, stream>>>(dk, dv, dout, q, k, v, lse, row_dots, s, scale, vec);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const dim3 q_grid(tiles(s), static_cast<unsigned int>(s.NH), static_cast<unsigned int>(s.B));
  flash_backward_q_kernel<Dp>
      <<<q_grid, kThreads, bytes, stream>>>(dq, dout, q, k, v, lse, row_dots, s, scale, vec);
  return launched();
}

bool valid(const FlashShape& s) {
  return s.head_dim > 0 && s.head_dim <= kFlashMaxHeadDim && s.NKV > 0 && s.NH % s.NKV == 0 &&
         s.B <= 65535 && s.NH <= 65535;
}

}  // namespace

cudaError_t flash_attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k,
                                    const bf16* v, const FlashShape& s, cudaStream_t stream) {
  if (!valid(s)) return cudaErrorInvalidValue;
  if (s.B == 0 || s.Tn == 0 || s.NH == 0) return launched();
  if (s.head_dim <= 16) return forward<16>(out, lse, q, k, v, s, stream);
  if (s.head_dim <= 32) return forward<32>(out, lse, q, k, v, s, stream);
  if (s.head_dim <= 64) return forward<64>(out, lse, q, k, v, s, stream);
  return forward<128>(out, lse, q, k, v, s, stream);
}

cudaError_t flash_attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                                     const bf16* k, const bf16* v, const bf16* out,
                                     const float* lse, float* row_dots, const FlashShape& s,
                                     cudaStream_t stream) {
  if (!valid(s)) return cudaErrorInvalidValue;
  if (s.B == 0 || s.Tn == 0 || s.NH == 0) return launched();
  constexpr int kDotThreads = 256;
  row_dots_kernel<<<grid_for(s.B * s.NH * s.Tn * 32, kDotThreads), kDotThreads, 0, stream>>>(
      row_dots, dout, out, s);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (s.head_dim <= 16) return backward<16>(dq, dk, dv, dout, q, k, v, lse, row_dots, s, stream);
  if (s.head_dim <= 32) return backward<32>(dq, dk, dv, dout, q, k, v, lse, row_dots, s, stream);
  if (s.head_dim <= 64) return backward<64>(dq, dk, dv, dout, q, k, v, lse, row_dots, s, stream);
  return backward<128>(dq, dk, dv, dout, q, k, v, lse, row_dots, s, stream);
}

}  // namespace dscore::transformer::gpu
