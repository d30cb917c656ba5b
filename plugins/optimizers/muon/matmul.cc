#include "matmul.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <vector>

namespace dscore::muon {

void matmul(const float* a, const float* b, float* c, int64_t r, int64_t k, int64_t n,
            bool transpose_b, bool accumulate) {
  // B as k x n rows, so the inner loop runs along contiguous rows of B and C.
  std::vector<float> transposed;
  if (transpose_b) {
    transposed.resize(static_cast<size_t>(k * n));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t kk = 0; kk < k; ++kk) transposed[kk * n + j] = b[j * k + kk];
    b = transposed.data();
  }
  constexpr int64_t kRows = 8;  // rows of C per task
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, (r + kRows - 1) / kRows),
      [&](const tbb::blocked_range<int64_t>& blocks) {
        std::vector<float> row(static_cast<size_t>(n));
        for (int64_t block = blocks.begin(); block < blocks.end(); ++block) {
          for (int64_t i = block * kRows; i < std::min(r, (block + 1) * kRows); ++i) {
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
      });
}

}  // namespace dscore::muon
