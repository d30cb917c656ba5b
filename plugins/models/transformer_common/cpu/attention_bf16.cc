#include "attention_bf16.h"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "attention_products.h"
#include "attention_tiles.h"
#include "gemm_bf16.h"
#include "parallel.h"

namespace dscore::transformer::cpu {
namespace {

using attention_tiles::BackwardTile;
using attention_tiles::ForwardTile;
using attention_tiles::RowDots;

constexpr int64_t kRows = kAttentionQueryBlock;  // query rows per block

// One head's Tn rows (stride ld) rounded into a dense (Tn, hs) copy.
void round_head(uint16_t* out, const float* x, int64_t ld, int64_t Tn, int64_t hs) {
  for (int64_t t = 0; t < Tn; ++t) round_to_bf16_serial(out + t * hs, x + t * ld, hs);
}

// Rows r0..r1 of x (x at row r0, stride ld, head h at h * hs) rounded into
// a dense (B, heads, Tn, hs) copy.
void round_head_rows(uint16_t* out, const float* x, int64_t ld, int64_t r0, int64_t r1, int64_t Tn,
                     int64_t heads, int64_t hs) {
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t b = r / Tn, t = r % Tn;
    for (int64_t h = 0; h < heads; ++h)
      round_to_bf16_serial(out + ((b * heads + h) * Tn + t) * hs, x + (r - r0) * ld + h * hs, hs);
  }
}

// Every head of x ((B, Tn) rows) so, over TBB blocks of rows.
void round_heads(uint16_t* out, const float* x, int64_t ld, int64_t B, int64_t Tn, int64_t heads,
                 int64_t hs) {
  for_blocks(B * Tn, kRowBlock, [&](int64_t r0, int64_t r1) {
    round_head_rows(out, x + r0 * ld, ld, r0, r1, Tn, heads, hs);
  });
}

// Grows a per-thread buffer to n elements (its contents are not kept).
template <typename X>
X* sized(AlignedVector<X>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

struct Scratch {
  AlignedVector<float> f32;
  AlignedVector<uint16_t> b16;
};

// The elements of a thread's fp32 and bf16 tiles, counted once for the
// kernels and for attention_bf16_working_bytes.
struct Tiles {
  int64_t f32, b16;
  uint64_t bytes() const {
    return static_cast<uint64_t>(f32) * sizeof(float) +
           static_cast<uint64_t>(b16) * sizeof(uint16_t);
  }
};
// As attention_forward_bf16 and attention_backward_bf16 carve them.
Tiles forward_tiles(int64_t Tn, int64_t hs) {
  return {kRows * Tn + kRows * hs + 2 * kRows, kRows * Tn};
}
Tiles backward_tiles(int64_t Tn, int64_t hs) {
  return {2 * kRows * Tn + 3 * Tn * hs + Tn, 4 * Tn * hs + 2 * kRows * Tn};
}

}  // namespace

int64_t attention_bf16_heads_elements(const AttentionShape& s) {
  return s.B * s.Tn * (s.NH + 2 * s.NKV) * s.head_dim;
}

uint64_t attention_bf16_working_bytes(const AttentionShape& shape, int64_t threads,
                                      bool heads_kept) {
  const int64_t Tn = shape.Tn, hs = shape.head_dim;
  const uint64_t heads =
      heads_kept ? 0
                 : static_cast<uint64_t>(attention_bf16_heads_elements(shape)) * sizeof(uint16_t);
  const uint64_t backward_tasks = static_cast<uint64_t>(
      std::clamp<int64_t>(threads, 1, std::max<int64_t>(shape.B * shape.NKV, 1)));
  uint64_t forward =
      static_cast<uint64_t>(std::max<int64_t>(threads, 1)) * forward_tiles(Tn, hs).bytes();
  uint64_t backward = backward_tasks * backward_tiles(Tn, hs).bytes();
  if (amx_gemm_available()) {  // the copies in the tiles' layouts (attention_products.h)
    forward += AmxProducts::forward_bytes(shape);
    backward += backward_tasks * AmxProducts::group_bytes(Tn, hs);
  }
  return heads + std::max(forward, backward);
}

namespace {

// The forward's blocks: (batch, head, query block) tasks, each one block
// of query rows against all its keys.
template <typename Products>
void forward_blocks(const Products& products, float* out, float* lse, const uint16_t* q16,
                    const AttentionShape& shape, VectorIsa isa) {
  const int64_t B = shape.B, Tn = shape.Tn, NH = shape.NH, NKV = shape.NKV, hs = shape.head_dim;
  const int64_t group = NH / NKV, o_ld = shape.out_ld, q_blocks = blocks_of(Tn, kRows);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const auto forward_tile = attention_tiles::forward_tile_for(isa);
  const Tiles tiles = forward_tiles(Tn, hs);
  tbb::enumerable_thread_specific<Scratch> scratch;
  tbb::parallel_for(int64_t{0}, B * NH * q_blocks, [&](int64_t task) {
    const int64_t bh = task / q_blocks, i0 = (task % q_blocks) * kRows;
    const int64_t b = bh / NH, h = bh % NH, bg = b * NKV + h / group;
    const int64_t rows = std::min(kRows, Tn - i0),
                  keys = i0 + rows;  // keys after i0 + rows: masked
    Scratch& local = scratch.local();
    // Scores and then probabilities (rows, keys); the output's rows; each
    // row's max and sum.
    float* s = sized(local.f32, tiles.f32);
    float* o = s + kRows * Tn;
    float* row_max = o + kRows * hs;
    float* row_sum = row_max + kRows;
    uint16_t* p16 = sized(local.b16, tiles.b16);
    products.scores(bg, q16 + (bh * Tn + i0) * hs, rows, keys, scale, s);
    std::fill(row_max, row_max + rows, -std::numeric_limits<float>::infinity());
    forward_tile({s, row_max, row_sum, nullptr, 0, rows, keys, hs, i0, 0});
    round_to_bf16_serial(p16, s, rows * keys);
    products.outputs(bg, p16, rows, keys, o);
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = 1.0f / row_sum[r];
      float* orow = out + (b * Tn + i0 + r) * o_ld + h * hs;
      for (int64_t c = 0; c < hs; ++c) orow[c] = o[r * hs + c] * inv;
      lse[bh * Tn + i0 + r] = row_max[r] + std::log(row_sum[r]);
    }
  });
}

}  // namespace

void attention_forward_bf16(float* out, float* lse, const float* q_all, const float* k_all,
                            const float* v_all, const AttentionShape& shape, VectorIsa isa,
                            uint16_t* heads) {
  const int64_t B = shape.B, Tn = shape.Tn, NH = shape.NH, NKV = shape.NKV, hs = shape.head_dim;
  // Dense bf16 copies of every head: the caller's, or kept from call to
  // call on this (the runner's) thread.
  thread_local AlignedVector<uint16_t> own_heads;
  uint16_t* q16 = heads != nullptr ? heads : sized(own_heads, attention_bf16_heads_elements(shape));
  uint16_t* k16 = q16 + B * NH * Tn * hs;
  uint16_t* v16 = k16 + B * NKV * Tn * hs;
  if (q_all != nullptr) {
    round_heads(q16, q_all, shape.q_ld, B, Tn, NH, hs);
    round_heads(k16, k_all, shape.kv_ld, B, Tn, NKV, hs);
    round_heads(v16, v_all, shape.kv_ld, B, Tn, NKV, hs);
  } else if (heads == nullptr) {
    throw std::logic_error("attention_forward_bf16: no q, k and v, and no rounded heads");
  }
  if (amx_gemm_available()) {
    forward_blocks(AmxProducts(shape, k16, v16), out, lse, q16, shape, isa);
  } else {
    forward_blocks(OneDnnProducts(shape, k16, v16), out, lse, q16, shape, isa);
  }
}

void round_heads_rows(uint16_t* heads, const float* q, const float* k, const float* v, int64_t r0,
                      int64_t r1, const AttentionShape& shape) {
  const int64_t Tn = shape.Tn, NH = shape.NH, NKV = shape.NKV, hs = shape.head_dim;
  uint16_t* k16 = heads + shape.B * NH * Tn * hs;
  uint16_t* v16 = k16 + shape.B * NKV * Tn * hs;
  round_head_rows(heads, q, shape.q_ld, r0, r1, Tn, NH, hs);
  round_head_rows(k16, k, shape.kv_ld, r0, r1, Tn, NKV, hs);
  round_head_rows(v16, v, shape.kv_ld, r0, r1, Tn, NKV, hs);
}

namespace {

// The backward's tasks: one per (batch, kv head) group, its query heads'
// blocks one after another, dk and dv summed over them in fp32.
template <typename Products>
void backward_groups(float* dq_all, float* dk_all, float* dv_all, const float* dout,
                     const float* q_all, const float* k_all, const float* v_all, const float* out,
                     const float* lse, const AttentionShape& shape, VectorIsa isa,
                     const uint16_t* heads) {
  const int64_t Tn = shape.Tn, NH = shape.NH, NKV = shape.NKV, hs = shape.head_dim;
  const int64_t group = NH / NKV, q_ld = shape.q_ld, kv_ld = shape.kv_ld, o_ld = shape.out_ld;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const auto probabilities = attention_tiles::probabilities_for(isa);
  const auto score_grads = attention_tiles::score_grads_for(isa);
  const auto row_dots = attention_tiles::row_dots_for(isa);
  const Tiles tiles = backward_tiles(Tn, hs);
  tbb::enumerable_thread_specific<Scratch> scratch;
  tbb::parallel_for(int64_t{0}, shape.B * NKV, [&](int64_t bg) {
    const int64_t b = bg / NKV, g = bg % NKV;
    Scratch& local = scratch.local();
    // fp32: P and dP then dS (kRows, Tn) each, a product's rows (Tn, hs),
    // dk and dv accumulated over the group's heads (Tn, hs) each, D (Tn).
    float* p = sized(local.f32, tiles.f32);
    float* dp = p + kRows * Tn;
    float* tmp = dp + kRows * Tn;
    float* dk_acc = tmp + Tn * hs;
    float* dv_acc = dk_acc + Tn * hs;
    float* d = dv_acc + Tn * hs;
    // bf16: the group's k and v, a head's q and dout (Tn, hs) each; P and
    // dS (kRows, Tn) each.
    // (The forward's kept heads instead, where given.)
    uint16_t* own_k16 = sized(local.b16, tiles.b16);
    uint16_t* own_v16 = own_k16 + Tn * hs;
    uint16_t* own_q16 = own_v16 + Tn * hs;
    uint16_t* dy16 = own_q16 + Tn * hs;
    uint16_t* p16 = dy16 + Tn * hs;
    uint16_t* ds16 = p16 + kRows * Tn;
    const int64_t kv_heads = shape.B * NKV * Tn * hs;
    const uint16_t* k16 = own_k16;
    const uint16_t* v16 = own_v16;
    if (heads != nullptr) {
      k16 = heads + shape.B * NH * Tn * hs + bg * Tn * hs;
      v16 = k16 + kv_heads;
    } else {
      round_head(own_k16, k_all + b * Tn * kv_ld + g * hs, kv_ld, Tn, hs);
      round_head(own_v16, v_all + b * Tn * kv_ld + g * hs, kv_ld, Tn, hs);
    }
    const typename Products::Group products(k16, v16, Tn, hs, tmp);
    std::fill(dk_acc, dk_acc + Tn * hs, 0.0f);
    std::fill(dv_acc, dv_acc + Tn * hs, 0.0f);
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const float* dy = dout + b * Tn * o_ld + h * hs;
      float* dq = dq_all + b * Tn * q_ld + h * hs;
      const uint16_t* q16 = own_q16;
      if (heads != nullptr) {
        q16 = heads + (b * NH + h) * Tn * hs;
      } else {
        round_head(own_q16, q_all + b * Tn * q_ld + h * hs, q_ld, Tn, hs);
      }
      round_head(dy16, dy, o_ld, Tn, hs);
      row_dots({d, dy, out + b * Tn * o_ld + h * hs, o_ld, Tn, hs});
      const float* row_lse = lse + (b * NH + h) * Tn;
      for (int64_t i0 = 0; i0 < Tn; i0 += kRows) {
        const int64_t rows = std::min(kRows, Tn - i0), keys = i0 + rows;
        const uint16_t* qi = q16 + i0 * hs;
        const uint16_t* dyi = dy16 + i0 * hs;
        // P = exp(scale Q K^T - lse), zero above the diagonal; dP = dY V^T;
        // dS = P (dP - D).
        products.scores(qi, rows, keys, scale, p);
        const BackwardTile<float> tile{p, dp, row_lse + i0, d + i0, rows, keys, i0, 0};
        probabilities(tile);
        products.output_grads(dyi, rows, keys, dp);
        score_grads(tile);
        round_to_bf16_serial(p16, p, rows * keys);
        round_to_bf16_serial(ds16, dp, rows * keys);
        // dV += P^T dY; dQ = scale dS K (this block's rows, complete: every
        // key is in it); dK += scale dS^T Q.
        products.add_value_grads(p16, dyi, rows, keys, dv_acc);
        products.query_grads(ds16, rows, keys, scale, dq + i0 * q_ld, q_ld);
        products.add_key_grads(ds16, qi, rows, keys, scale, dk_acc);
      }
    }
    float* dk = dk_all + b * Tn * kv_ld + g * hs;
    float* dv = dv_all + b * Tn * kv_ld + g * hs;
    // Element loops, not std::copy: a memmove call for each head-wide row
    // (64 values) cost more than the copy.
    for (int64_t t = 0; t < Tn; ++t)
      for (int64_t i = 0; i < hs; ++i) {
        dk[t * kv_ld + i] = dk_acc[t * hs + i];
        dv[t * kv_ld + i] = dv_acc[t * hs + i];
      }
  });
}

}  // namespace

void attention_backward_bf16(float* dq_all, float* dk_all, float* dv_all, const float* dout,
                             const float* q_all, const float* k_all, const float* v_all,
                             const float* out, const float* lse, const AttentionShape& shape,
                             VectorIsa isa, const uint16_t* heads) {
  if (amx_gemm_available()) {
    backward_groups<AmxProducts>(dq_all, dk_all, dv_all, dout, q_all, k_all, v_all, out, lse, shape,
                                 isa, heads);
  } else {
    backward_groups<OneDnnProducts>(dq_all, dk_all, dv_all, dout, q_all, k_all, v_all, out, lse,
                                    shape, isa, heads);
  }
}

}  // namespace dscore::transformer::cpu
