// Row-major bf16 GEMM for the CPU kernels: C = alpha * op(A) * op(B) + beta
// * C with A and B in bf16 (raw uint16_t bits), products accumulated and C
// held in fp32. Where the CPU has AMX: on dscore's AMX tiles (amx_gemm.h;
// DSCORE_BF16_GEMM=onednn declines them), which on the model's shapes ran
// 7-15% more tokens a step than oneDNN 2.6.3's kernels (bench/README.md).
// Elsewhere through oneDNN's matmul primitive (the build's optional
// oneDNN, DSCORE_WITH_ONEDNN; oneDNN 2.x has no bf16 gemm call, only the
// primitive), cut like gemm<float> (gemm_blocks.h): fixed blocks, each one
// single-threaded oneDNN call, TBB across them. Either way the blocks are
// fixed, so results do not depend on the thread count; a beta other than 0
// or 1 (which the models never pass) takes oneDNN's path on AMX too.
//
// Used only where it runs at full speed: a build with oneDNN on a CPU with
// avx512_bf16 or AMX, and DSCORE_CPU_ISA not lowering the ISA below avx512
// (DSCORE_CPU_ISA=avx2 forces the fp32 path, as on an AVX2-only machine).
// Elsewhere callers keep the fp32 path; calling gemm_bf16 there throws.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "aligned.h"
#include "bf16_round.h"  // the rounding its callers use beside it
#include "gemm.h"

namespace dscore::transformer::cpu {

// Whether gemm_bf16 may be used here; when not, why (for logs and skipped
// tests): the build, the CPU, or DSCORE_CPU_ISA.
bool bf16_gemm_available();
const char* bf16_gemm_unavailable_reason();  // "" when available

// Whether a layer whose parameter views have this dtype computes on bf16
// operands here: bf16 views where the bf16 GEMM is available. The one rule
// for the host backend, the runners' operand buffers and the memory plan.
inline bool bf16_operands_for(dscore_dtype param_dtype) {
  return param_dtype == DSCORE_DTYPE_BF16 && bf16_gemm_available();
}

// bias (n values, or nullptr) is added to every row of the product inside
// the call: C = op(A) op(B) + bias + beta * C, without a pass writing it into
// C first. With a bias, alpha must be 1.
void gemm_bf16(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc,
               const float* bias = nullptr);

// The same, as one oneDNN call on the calling thread (inside a parallel
// loop: attention's row blocks where the AMX tiles are declined or absent,
// attention_products.h). oneDNN picks its AMX kernel for dense operands and
// a C written with beta 0; strided ones or beta 1 get a slower one.
void gemm_bf16_serial(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                      float* c, int64_t ldc);

// A product whose fp32 result one elementwise pass reads once (GELU's
// gradient from the MLP projection's input gradient, attention's rounded
// heads from the qkv linear): C = A op(B) + bias (A row-major, m x k), made
// in fixed chunks of kConsumedRows rows over TBB, each into a buffer of its
// task's that stays in cache, where consume(r0, r1, rows) reads it (rows:
// (r1 - r0) x n, pitch n; consume may overwrite it). C is never written to
// memory in full: on the GPT's shapes, a 2048 x 1536 result written out
// took about twice as long as the product into cache (bench/README.md).
// Each chunk is one single-threaded call, so the result does not depend on
// the thread count. consume runs inside the chunk's task and must not start
// parallel work (the buffer is its thread's).
constexpr int64_t kConsumedRows = 64;
using ConsumeRows = std::function<void(int64_t r0, int64_t r1, float* rows)>;
void gemm_bf16_consumed(Op op_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                        const uint16_t* b, int64_t ldb, const float* bias,
                        const ConsumeRows& consume);
// B (k x n) copied once into the layout the products read, for products
// that share it (the LM head's weight, read by every block of rows): a
// plain gemm_bf16 call copies its B so itself, every call. On oneDNN:
// its blocked layout, in `storage` (grown as needed; the caller's, reused
// from call to call), valid while storage is not touched. On AMX tiles
// (amx_gemm.h): the tiles' layout, kept on the calling thread instead
// (storage unused), valid until the next Bf16PackedB made on that thread.
class AmxB;
class Bf16PackedB {
 public:
  Bf16PackedB(Op op_b, int64_t n, int64_t k, const uint16_t* b, int64_t ldb,
              AlignedVector<uint8_t>& storage);
  Op op_b() const { return op_b_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  const uint8_t* data() const { return data_; }
  const void* layout() const { return layout_; }  // gemm_bf16.cc's description of it
  const AmxB* tiles() const { return tiles_; }    // the AMX copy, or nullptr

 private:
  Op op_b_;
  int64_t n_, k_;
  const void* layout_ = nullptr;
  const uint8_t* data_ = nullptr;
  const AmxB* tiles_ = nullptr;
};
// The bytes of such a copy (0 where the bf16 GEMM is unavailable).
uint64_t bf16_packed_bytes(Op op_b, int64_t n, int64_t k);
// C (m x n, pitch ldc) = A B with A row-major (m x k, lda): in the blocks of
// rows gemm_bf16 cuts (whole rows of C: oneDNN's AMX kernel), or chunks of
// kAmxChunk rows on AMX tiles, each one call reading the packed B. C is
// overwritten.
void gemm_bf16_packed(int64_t m, const uint16_t* a, int64_t lda, const Bf16PackedB& b, float* c,
                      int64_t ldc);

// What it keeps from call to call for products of up to n columns and k
// inner: a chunk per thread and B in the kernel's layout (on the caller's).
inline uint64_t gemm_bf16_consumed_working_bytes(int64_t n, int64_t k, int64_t threads) {
  return static_cast<uint64_t>(threads * kConsumedRows * n) * sizeof(float) +
         static_cast<uint64_t>(n * k) * sizeof(uint16_t);
}

}  // namespace dscore::transformer::cpu
