// The row work of causal attention on one tile of scores, shared by the
// fp32 tiles (attention.cc) and the bf16 row blocks (attention_bf16.cc):
// the softmax, the probabilities and their gradient, and D. For float each
// piece is compiled once per ISA in attention.cc, with the same bits on
// each; *_for(isa) picks one.
#pragma once

#include <cstdint>

#include "vector_math.h"

namespace dscore::transformer::cpu::attention_tiles {

// The forward's work on one (rows x cols) tile of scaled scores s, for key
// block j0 of query block i0: the online softmax. Each row's probabilities
// replace its scores (zero past the diagonal), its running max and sum are
// updated, and what earlier key blocks added to its output o is rescaled
// (o is not read when j0 is 0).
template <typename T>
struct ForwardTile {
  T* s;
  T* row_max;
  T* row_sum;
  T* o;
  int64_t o_ld, rows, cols, hs, i0, j0;
};

// The backward's elementwise work on one tile: P = exp(S - lse) (zero past
// the diagonal) in place of the scaled scores, and dS = P (dP - D) in place
// of dP.
template <typename T>
struct BackwardTile {
  T* p;
  T* dp;
  const T* lse;  // the tile's rows' logsumexp
  const T* d;    // the tile's rows' D
  int64_t rows, cols, i0, j0;
};

// D = rowsum(dout * out) over a head's rows.
template <typename T>
struct RowDots {
  T* d;
  const T* dy;
  const T* y;
  int64_t ld, rows, hs;
};

void (*forward_tile_for(VectorIsa isa))(const ForwardTile<float>&);
void (*probabilities_for(VectorIsa isa))(const BackwardTile<float>&);
void (*score_grads_for(VectorIsa isa))(const BackwardTile<float>&);
void (*row_dots_for(VectorIsa isa))(const RowDots<float>&);

}  // namespace dscore::transformer::cpu::attention_tiles
