#include "matmul.h"

#include <cblas.h>
#include <dlfcn.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <vector>

namespace dscore::muon {
namespace {

constexpr int64_t kRows = 64;  // rows of C per task

struct LoadedBlas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  std::string route = "a plain loop (OpenBLAS is not loaded in this process)";
};

// OpenBLAS as the models loaded it, or nothing: RTLD_NOLOAD never loads it.
const LoadedBlas& loaded_blas() {
  static const LoadedBlas blas = [] {
    LoadedBlas b;
    for (const char* name : {"libopenblas.so.0", DSCORE_OPENBLAS_PATH}) {
      void* handle = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
      if (handle == nullptr) continue;
      b.sgemm = reinterpret_cast<decltype(&cblas_sgemm)>(dlsym(handle, "cblas_sgemm"));
      auto corename = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_corename"));
      if (b.sgemm != nullptr)
        b.route = std::string("OpenBLAS (core ") + (corename ? corename() : "unknown") +
                  ", as the model loaded it)";
      break;
    }
    return b;
  }();
  return blas;
}

// Rows [i0, i1) of C = A B (B k x n, contiguous rows), summed in order.
void loop_rows(const float* a, const float* b, float* c, int64_t i0, int64_t i1, int64_t k,
               int64_t n, bool accumulate) {
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t i = i0; i < i1; ++i) {
    std::fill(row.begin(), row.end(), 0.0f);
    float* out = row.data();
    for (int64_t kk = 0; kk < k; ++kk) {
      const float x = a[i * k + kk];
      const float* in = b + kk * n;
      for (int64_t j = 0; j < n; ++j) out[j] += x * in[j];
    }
    float* dst = c + i * n;
    if (accumulate)
      for (int64_t j = 0; j < n; ++j) dst[j] += out[j];
    else
      std::copy(out, out + n, dst);
  }
}

}  // namespace

std::string matmul_route() { return loaded_blas().route; }

void matmul(const float* a, const float* b, float* c, int64_t r, int64_t k, int64_t n,
            bool transpose_b, bool accumulate) {
  const LoadedBlas& blas = loaded_blas();
  std::vector<float> transposed;
  if (transpose_b && blas.sgemm == nullptr) {
    // The loop runs along contiguous rows of B.
    transposed.resize(static_cast<size_t>(k * n));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t kk = 0; kk < k; ++kk) transposed[kk * n + j] = b[j * k + kk];
    b = transposed.data();
  }
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, (r + kRows - 1) / kRows),
      [&](const tbb::blocked_range<int64_t>& blocks) {
        for (int64_t block = blocks.begin(); block < blocks.end(); ++block) {
          const int64_t i0 = block * kRows, i1 = std::min(r, i0 + kRows);
          if (blas.sgemm == nullptr) {
            loop_rows(a, b, c, i0, i1, k, n, accumulate);
            continue;
          }
          blas.sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
                     static_cast<int>(i1 - i0), static_cast<int>(n), static_cast<int>(k), 1.0f,
                     a + i0 * k, static_cast<int>(k), b, static_cast<int>(transpose_b ? k : n),
                     accumulate ? 1.0f : 0.0f, c + i0 * n, static_cast<int>(n));
        }
      });
}

}  // namespace dscore::muon
