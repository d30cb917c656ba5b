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
// fp32 per head group. Where the CPU has AMX the products run on dscore's
// tiles instead (attention_products.h), each head group's keys and values
// copied into their layout once. Fixed blocks and tasks: results do not
// depend on the thread count.
#pragma once

#include "attention.h"

namespace dscore::transformer::cpu {

// The dense bf16 heads the forward rounds q, k and v into: q's (B, NH, Tn,
// head_dim), then k's and v's (B, NKV, Tn, head_dim) each.
int64_t attention_bf16_heads_elements(const AttentionShape& shape);

// As attention_forward / attention_backward; throws where the bf16 GEMM
// is unavailable. `heads` (attention_bf16_heads_elements values): where
// the forward keeps its rounded heads, for a backward given the same
// pointer, which then reads them instead of q, k and v (nullptr there);
// nullptr: the forward rounds into a scratch of its own and the backward
// rounds q, k and v again. The same results either way. A forward given
// heads but q, k and v nullptr finds them rounded already
// (round_heads_rows).
void attention_forward_bf16(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionShape& shape, VectorIsa isa = vector_isa(),
                            uint16_t* heads = nullptr);
void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* out, const float* lse,
                             const AttentionShape& shape, VectorIsa isa = vector_isa(),
                             const uint16_t* heads = nullptr);

// Rows r0..r1 of q, k and v (q, k, v point at row r0's; strides as the
// shape says) rounded into `heads` as the forward rounds them, on the
// calling thread: for a product that hands its rows over in chunks
// (gemm_bf16_consumed), so the fp32 q, k and v are never written out.
void round_heads_rows(uint16_t* heads, const float* q, const float* k, const float* v, int64_t r0,
                      int64_t r1, const AttentionShape& shape);

// The most bytes the two hold at once beyond their arguments, with
// `threads` worker threads: the dense bf16 heads (kept from call to call,
// unless the caller keeps them: heads_kept) and each thread's tiles.
uint64_t attention_bf16_working_bytes(const AttentionShape& shape, int64_t threads,
                                      bool heads_kept = false);

}  // namespace dscore::transformer::cpu
