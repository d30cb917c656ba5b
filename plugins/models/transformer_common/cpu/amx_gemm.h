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
// Tests: decline the AMX products as DSCORE_BF16_GEMM=onednn does (true),
// or not (false: used where available); nullptr restores the process's choice.
void set_amx_gemm_declined_for_testing(const bool* declined);
// Whether a DSCORE_BF16_GEMM value keeps oneDNN's kernels ("onednn"); unset,
// empty or "amx" do not. Throws std::invalid_argument for any other name.
bool amx_gemm_declined(const char* asked);
// Why not, for logs and skipped tests ("" when available).
const char* amx_gemm_unavailable_reason();

// op(A) (m x k, row-major with lda) in the tiles' layout: tiles of 16 rows
// x 32 inner, row tiles in pairs. Reused from call to call (the storage
// only grows).
class AmxA {
 public:
  void pack(Op op, int64_t m, int64_t k, const uint16_t* a, int64_t lda);
  int64_t m() const { return m_; }
  int64_t k() const { return k_; }
  const uint16_t* tiles() const { return tiles_.data(); }

 private:
  int64_t m_ = 0, k_ = 0;
  AlignedVector<uint16_t> tiles_;
};

// op(B) (k x n, row-major with ldb) in the tiles' layout: tiles of 16 inner
// pairs x 16 columns (each column's two inner values side by side), column
// tiles in pairs.
class AmxB {
 public:
  void pack(Op op, int64_t k, int64_t n, const uint16_t* b, int64_t ldb);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  const uint16_t* tiles() const { return tiles_.data(); }

 private:
  int64_t k_ = 0, n_ = 0;
  AlignedVector<uint16_t> tiles_;
};

// C (m x n, ldc) = alpha * A B + beta * C, beta 0 or 1 (beta 0 never reads
// C). Throws std::logic_error on mismatched inner sizes or another beta.
void amx_gemm(const AmxA& a, const AmxB& b, float alpha, float beta, float* c, int64_t ldc);
// The same with B's leading part: its first a.k() inner rows and first n
// columns (a head's keys up to a query block's diagonal, from a copy of
// all of them). Throws where the part exceeds B.
void amx_gemm_part(const AmxA& a, const AmxB& b, int64_t n, float alpha, float beta, float* c,
                   int64_t ldc);

// The bytes of the copies of an m x k A and a k x n B.
uint64_t amx_a_bytes(int64_t m, int64_t k);
uint64_t amx_b_bytes(int64_t k, int64_t n);

}  // namespace dscore::transformer::cpu
