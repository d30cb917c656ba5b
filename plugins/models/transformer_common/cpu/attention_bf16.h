// Causal grouped-query self-attention with bf16 products, for bf16 runs
// where the bf16 GEMM is available (gemm_bf16.h: oneDNN with avx512_bf16
// or AMX). The layouts, the state (each row's logsumexp) and the results
// are those of attention.h; q, k, v, dout and the probabilities and their
// gradient are rounded to bf16 before each product, accumulated in fp32,
// as torch's bf16 attention does. The softmax and everything between the
// products stay fp32 (the row work of attention_tiles.h).
//
// oneDNN runs a 64 x 64 x 64 tile with strided operands at the speed of
// OpenBLAS's fp32 tile; its AMX kernel needs dense operands and a C
// written with beta 0, and pays about a microsecond a call. So the heads
// are first rounded into dense per-head copies, and each block of query
// rows meets all its keys at once (one 64 x L product, the row softmax
// over the whole row instead of online), with dk and dv accumulated in
// fp32 per head group. Fixed blocks and tasks: results do not depend on
// the thread count.
#pragma once

#include "attention.h"

namespace dscore::transformer::cpu {

// As attention_forward / attention_backward; throws where the bf16 GEMM
// is unavailable.
void attention_forward_bf16(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionShape& shape, VectorIsa isa = vector_isa());
void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* out, const float* lse,
                             const AttentionShape& shape, VectorIsa isa = vector_isa());

// The most bytes the two hold at once beyond their arguments, with
// `threads` worker threads: the dense bf16 heads (kept from call to call)
// and each thread's tiles.
uint64_t attention_bf16_working_bytes(const AttentionShape& shape, int64_t threads);

}  // namespace dscore::transformer::cpu
