// Moving tokens to their experts and back (host memory, any element type):
// the kept routes of a Routing (gating.h) packed expert by expert, each
// expert's rows in slot order, so an expert's tokens are one contiguous
// (rows, C) block its linears multiply at once. Unlike DeepSpeed's
// (E, capacity, C) buffer, no row is padding: the packed rows are the kept
// routes, at most k per token (and under expert parallelism these blocks
// are what each rank sends: variable counts, no empty slots).
#pragma once

#include <cstdint>
#include <vector>

#include "gating.h"

namespace dscore::transformer::moe {

struct Packing {
  std::vector<int64_t> offset;        // E + 1: expert e's rows are [offset[e], offset[e + 1])
  std::vector<int64_t> row_of_route;  // per route (route-major, k x S): its row, or -1 dropped
  std::vector<int64_t> token_of_row;  // per row: the token it carries
  int64_t rows() const { return offset.back(); }
};

inline Packing pack(const Routing& r) {
  Packing p;
  p.offset.assign(static_cast<size_t>(r.experts + 1), 0);
  for (int32_t e : r.expert)
    if (e >= 0) ++p.offset[e + 1];
  for (int64_t e = 0; e < r.experts; ++e) p.offset[e + 1] += p.offset[e];
  p.row_of_route.assign(r.expert.size(), -1);
  p.token_of_row.assign(static_cast<size_t>(p.rows()), 0);
  for (size_t i = 0; i < r.expert.size(); ++i) {
    if (r.expert[i] < 0) continue;
    const int64_t row = p.offset[r.expert[i]] + r.slot[i];
    p.row_of_route[i] = row;
    p.token_of_row[row] = static_cast<int64_t>(i) % r.tokens;
  }
  return p;
}

// rows[row] = x[token_of_row[row]] (C channels).
template <class T>
void gather_rows(T* rows, const T* x, const Packing& p, int64_t C) {
  for (int64_t row = 0; row < p.rows(); ++row) {
    const T* src = x + p.token_of_row[row] * C;
    T* dst = rows + row * C;
    for (int64_t c = 0; c < C; ++c) dst[c] = src[c];
  }
}

// dx[token] += drows[row] over the rows of each token.
template <class T>
void scatter_add_rows(T* dx, const T* drows, const Packing& p, int64_t C) {
  for (int64_t row = 0; row < p.rows(); ++row) {
    T* dst = dx + p.token_of_row[row] * C;
    const T* src = drows + row * C;
    for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
  }
}

// out[s] = sum over token s's kept routes of weight * y[row] (overwrites;
// a token whose routes all dropped gets 0, as DeepSpeed's combine).
template <class T>
void combine(T* out, const T* y, const Routing& r, const Packing& p, int64_t C) {
  const int64_t S = r.tokens;
  for (int64_t s = 0; s < S; ++s) {
    T* o = out + s * C;
    for (int64_t c = 0; c < C; ++c) o[c] = T(0);
    for (int64_t j = 0; j < r.k; ++j) {
      const size_t i = static_cast<size_t>(j * S + s);
      if (p.row_of_route[i] < 0) continue;
      const T w = static_cast<T>(r.weight[i]);
      const T* src = y + p.row_of_route[i] * C;
      for (int64_t c = 0; c < C; ++c) o[c] += w * src[c];
    }
  }
}

// From dout (S x C): dy[row] = weight * dout[token] and dweight[route] =
// <dout[token], y[row]> (0 for dropped routes).
template <class T>
void combine_backward(T* dy, T* dweight, const T* dout, const T* y, const Routing& r,
                      const Packing& p, int64_t C) {
  const int64_t S = r.tokens;
  for (size_t i = 0; i < r.expert.size(); ++i) {
    dweight[i] = T(0);
    const int64_t row = p.row_of_route[i];
    if (row < 0) continue;
    const T* d = dout + (static_cast<int64_t>(i) % S) * C;
    const T* src = y + row * C;
    const T w = static_cast<T>(r.weight[i]);
    T dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      dy[row * C + c] = w * d[c];
      dot += d[c] * src[c];
    }
    dweight[i] = dot;
  }
}

}  // namespace dscore::transformer::moe
