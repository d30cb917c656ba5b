// The WMMA API (nvcuda::wmma) for the CPU emulation (cuda_emulation.h): a
// fragment holds its whole tile in every lane, row-major; loads read it all,
// mma_sync computes it all in fp32 (products and sums in k order; the
// warp's first lane computes, the others with the same tiles take its
// result), and a store writes element e from lane e % 32 only. Loads and stores check
// what the hardware requires: a 256-bit aligned pointer and a leading
// dimension that is a multiple of 16 bytes.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_emulation.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
 public:
  static constexpr int kRows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int kCols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = kRows * kCols;
  T x[num_elements];
};

namespace detail {

inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
void check_access(const T* p, unsigned ldm, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    dscore::cuda_emulation::fail(what);  // the pointer is not 256-bit aligned
  if ((ldm * sizeof(T)) % 16 != 0) dscore::cuda_emulation::fail(what);
}

// Element (r, c) of a tile at p: row-major (r * ldm + c) or column-major.
template <typename T>
T at(const T* p, unsigned ldm, int r, int c, bool row_major_layout) {
  return row_major_layout ? p[r * ldm + c] : p[c * ldm + r];
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, T value) {
  for (T& v : f.x) v = value;
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load names its layout");
  detail::check_access(p, ldm, "load_matrix_sync: misaligned pointer or leading dimension");
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int r = 0; r < F::kRows; ++r)
    for (int c = 0; c < F::kCols; ++c)
      f.x[r * F::kCols + c] = detail::at(p, ldm, r, c, std::is_same_v<Layout, row_major>);
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm,
                      layout_t layout) {
  detail::check_access(p, ldm, "load_matrix_sync: misaligned pointer or leading dimension");
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) f.x[r * N + c] = detail::at(p, ldm, r, c, layout == mem_row_major);
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm,
                       layout_t layout) {
  detail::check_access(p, ldm, "store_matrix_sync: misaligned pointer or leading dimension");
  const int lane = dscore::cuda_emulation::lane();
  for (int e = lane; e < M * N; e += 32) {
    const int r = e / N, c = e % N;
    (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
  }
}

template <int M, int N, int K, typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, M, N, K, float>& d,
              const fragment<matrix_a, M, N, K, T, LayoutA>& a,
              const fragment<matrix_b, M, N, K, T, LayoutB>& b,
              const fragment<accumulator, M, N, K, float>& c) {
  unsigned char tiles[sizeof(a.x) + sizeof(b.x) + sizeof(c.x)];
  std::memcpy(tiles, a.x, sizeof(a.x));
  std::memcpy(tiles + sizeof(a.x), b.x, sizeof(b.x));
  std::memcpy(tiles + sizeof(a.x) + sizeof(b.x), c.x, sizeof(c.x));
  float out[M * N];
  if (!dscore::cuda_emulation::recall_product(tiles, sizeof(tiles), out, sizeof(out))) {
    for (int r = 0; r < M; ++r)
      for (int col = 0; col < N; ++col) {
        float sum = c.x[r * N + col];
        for (int k = 0; k < K; ++k)
          sum += detail::to_float(a.x[r * K + k]) * detail::to_float(b.x[k * N + col]);
        out[r * N + col] = sum;
      }
    dscore::cuda_emulation::remember_product(tiles, sizeof(tiles), out, sizeof(out));
  }
  for (int e = 0; e < M * N; ++e) d.x[e] = out[e];
}

}  // namespace nvcuda::wmma
