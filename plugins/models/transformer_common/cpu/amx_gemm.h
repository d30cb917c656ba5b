// Small bf16 products on the CPU's AMX tiles, on the calling thread: the
// attention's per-block products (64 query rows against up to T keys,
// inner size the head's 64 channels or the block's keys). oneDNN pays
// about a microsecond a call and reads strided or transposed operands at
// a fraction of its AMX speed; on the bench GPT (T 256, head 64) its
// attention products ran at 190-300 GFLOP/s on 2 cores (bench/README.md).
//
// Operands are first copied into the tiles' layouts (AmxA, AmxB: zero
// padded to whole tiles, so any m, n and k work), then multiplied
// 32 x 32 block of C at a time (four accumulator tiles), every element
// summed over k in the same order whatever the shape or thread. A copy made
// once serves many products: the attention packs a head's keys once for
// all its query blocks.
//
// Available where the CPU has AMX (amx_bf16) and Linux grants the tile
// state (arch_prctl), DSCORE_CPU_ISA does not lower the ISA below avx512,
// and DSCORE_BF16_GEMM is not "onednn" (which keeps oneDNN's kernels, for
// comparison). The products, like oneDNN's AMX ones, flush bf16 subnormal
// operands to zero.
#pragma once

#include <cstdint>

#include "aligned.h"
#include "gemm.h"

namespace dscore::transformer::cpu {

bool amx_gemm_available();
// Declines the AMX products from now on as DSCORE_BF16_GEMM=onednn does
// (true), or takes them again where available (false): for tests and the
// benches' A/B runs.
void set_amx_gemm_declined(bool declined);
// Whether a DSCORE_BF16_GEMM value keeps oneDNN's kernels ("onednn"); unset,
// empty or "amx" do not. Throws std::invalid_argument for any other name.
bool amx_gemm_declined(const char* asked);
// Why not, for logs and skipped tests ("" when available).
const char* amx_gemm_unavailable_reason();

// op(A) (m x k, row-major with lda) in the tiles' layout: tiles of 16 rows
// x 32 inner, row tiles in pairs. Reused from call to call (the storage
// only grows).
// Copies are made on the calling thread, or with over_threads (a large
// operand shared by a product's chunks, copied by the thread that starts
// the product) over TBB; never over_threads inside another parallel loop's
// task (amx_gemm.cc, for_tile_pairs).
class AmxA {
 public:
  void pack(Op op, int64_t m, int64_t k, const uint16_t* a, int64_t lda, bool over_threads = false);
  // A row-major A whose rows fill whole tiles (m a multiple of 32, k of
  // 32) is read where it lies, the tiles loaded with its stride: no copy.
  // Otherwise copied, as pack. A must outlive the products.
  void use(int64_t m, int64_t k, const uint16_t* a, int64_t lda);
  int64_t m() const { return m_; }
  int64_t k() const { return k_; }
  // Tile (row tile r, inner tile t) starts at data() + r * row_tile_step()
  // + t * inner_step(); its rows lie stride_bytes() apart.
  const uint16_t* data() const { return data_; }
  int64_t row_tile_step() const { return row_tile_step_; }
  int64_t inner_step() const { return inner_step_; }
  int64_t stride_bytes() const { return stride_bytes_; }

 private:
  int64_t m_ = 0, k_ = 0;
  const uint16_t* data_ = nullptr;
  int64_t row_tile_step_ = 0, inner_step_ = 0, stride_bytes_ = 0;
  AlignedVector<uint16_t> tiles_;
};

// op(B) (k x n, row-major with ldb) in the tiles' layout: tiles of 16 inner
// pairs x 16 columns (each column's two inner values side by side), column
// tiles in pairs.
class AmxB {
 public:
  void pack(Op op, int64_t k, int64_t n, const uint16_t* b, int64_t ldb, bool over_threads = false);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  const uint16_t* tiles() const { return tiles_.data(); }

 private:
  int64_t k_ = 0, n_ = 0;
  AlignedVector<uint16_t> tiles_;
};

// C (m x n, ldc) = alpha * A B + bias + beta * C, beta 0 or 1 (beta 0
// never reads C), bias (n values, added to every row) only with alpha 1.
// Throws std::logic_error on mismatched inner sizes, another beta, or a
// bias with alpha != 1.
void amx_gemm(const AmxA& a, const AmxB& b, float alpha, float beta, float* c, int64_t ldc,
              const float* bias = nullptr);
// The same with B's leading part: its first a.k() inner rows and first n
// columns (a head's keys up to a query block's diagonal, from a copy of
// all of them). Throws where the part exceeds B.
void amx_gemm_part(const AmxA& a, const AmxB& b, int64_t n, float alpha, float beta, float* c,
                   int64_t ldc, const float* bias = nullptr);

// A whole product as gemm_bf16 (gemm_bf16.h) makes it, over TBB: the inner
// size in blocks (the first meets C with beta and the bias, the rest add
// to it), C's longer side in chunks of kAmxChunk, each one task that takes
// its part of A (or copies its part of B) while the other operand's block
// is copied once for all; by rows, B's columns in panels of about 1 MiB,
// each met by every chunk of rows before the next. A row-major A is read where it lies, in inner
// blocks of kAmxInnerBlock; a transposed one (a weight gradient's, inner
// size the tokens) is copied, in blocks of kAmxCopiedInnerBlock, which
// keep each chunk's copy in cache (on the bench GPT's weight gradients 512
// ran 1.2x an unblocked 2048). Fixed blocks and chunks: the result does
// not depend on the thread count. `bench/bf16_products` compares each of a
// GPT layer's products with oneDNN's (bench/README.md).
// C (m x n) = alpha * op(A) B + bias + beta * C for a B already copied (k x
// n, as many inner values as op(A) has), as amx_gemm_blocks' chunks of
// rows meet it: B's column panels one after another, each met by every
// chunk of kAmxChunk rows (op(A) read where it lies, or copied by its
// chunk). The LM head's logits, against its weight copied once a pass.
void amx_gemm_rows(Op op_a, int64_t m, const uint16_t* a, int64_t lda, const AmxB& b, float alpha,
                   float beta, float* c, int64_t ldc, const float* bias = nullptr);
constexpr int64_t kAmxInnerBlock = 2048;
constexpr int64_t kAmxCopiedInnerBlock = 512;
constexpr int64_t kAmxChunk = 64;
void amx_gemm_blocks(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                     float* c, int64_t ldc, const float* bias = nullptr);

// The same with B's n columns from first_column (a multiple of 32) into C's
// first n: a panel of a wide B. Throws where they exceed B.
void amx_gemm_columns(const AmxA& a, const AmxB& b, int64_t first_column, int64_t n, float alpha,
                      float beta, float* c, int64_t ldc, const float* bias = nullptr);

// The bytes of the copies of an m x k A and a k x n B.
uint64_t amx_a_bytes(int64_t m, int64_t k);
uint64_t amx_b_bytes(int64_t k, int64_t n);

}  // namespace dscore::transformer::cpu
