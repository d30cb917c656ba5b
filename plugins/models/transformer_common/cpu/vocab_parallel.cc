#include "vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "linear.h"
#include "parallel.h"

namespace dscore::transformer::cpu {

template <typename T>
double vocab_parallel_lm_head(T* dx, T* dw, const T* x, const T* w, const int32_t* targets,
                              int64_t N, int64_t C, int64_t V_local, int64_t v0, int64_t V_whole,
                              double grad_scale, const GroupReductions<T>& group) {
  const int64_t rb = lm_rows_per_block(N, V_whole);
  std::vector<T> logits(static_cast<size_t>(rb * V_local));
  std::vector<double> row_max(static_cast<size_t>(rb));
  // The exponentials' sums, then the target logits: one reduction.
  std::vector<double> sums(static_cast<size_t>(2 * rb));
  double loss = 0;
  for (int64_t r0 = 0; r0 < N; r0 += rb) {
    const int64_t rows = std::min(rb, N - r0);
    matmul_forward<T>(logits.data(), x + r0 * C, w, nullptr, rows, C, V_local);
    for (int64_t r = 0; r < rows; ++r) {
      const T* z = logits.data() + r * V_local;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t v = 0; v < V_local; ++v) m = std::max(m, static_cast<double>(z[v]));
      row_max[static_cast<size_t>(r)] = m;
    }
    group.max(row_max.data(), rows);
    double* exp_sum = sums.data();
    double* target_logit = sums.data() + rows;
    for_blocks(rows, 4, [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) {
        T* z = logits.data() + r * V_local;
        const double m = row_max[static_cast<size_t>(r)];
        const int64_t y = targets[r0 + r] - v0;
        // The target's logit, on the one rank whose rows hold it.
        target_logit[r] =
            targets[r0 + r] >= 0 && y >= 0 && y < V_local ? static_cast<double>(z[y]) : 0.0;
        double s = 0;
        for (int64_t v = 0; v < V_local; ++v) {
          z[v] = static_cast<T>(std::exp(static_cast<double>(z[v]) - m));
          s += static_cast<double>(z[v]);
        }
        exp_sum[r] = s;
      }
    });
    group.sum(sums.data(), 2 * rows);
    for (int64_t r = 0; r < rows; ++r)
      if (targets[r0 + r] >= 0)
        loss += std::log(exp_sum[r]) + row_max[static_cast<size_t>(r)] - target_logit[r];
    if (dx == nullptr) continue;
    for_blocks(rows, 4, [&](int64_t a, int64_t b) {  // dlogits = scale * (p - onehot)
      for (int64_t r = a; r < b; ++r) {
        T* z = logits.data() + r * V_local;
        if (targets[r0 + r] < 0) {
          std::fill(z, z + V_local, T{0});
          continue;
        }
        const double g = grad_scale / exp_sum[r];
        for (int64_t v = 0; v < V_local; ++v) z[v] = static_cast<T>(static_cast<double>(z[v]) * g);
        const int64_t y = targets[r0 + r] - v0;
        if (y >= 0 && y < V_local) z[y] -= static_cast<T>(grad_scale);
      }
    });
    matmul_backward<T>(dx + r0 * C, dw, nullptr, logits.data(), x + r0 * C, w, rows, C, V_local);
  }
  if (dx != nullptr) group.sum_values(dx, N * C);
  return loss;
}

template double vocab_parallel_lm_head<float>(float*, float*, const float*, const float*,
                                              const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                              int64_t, double, const GroupReductions<float>&);
template double vocab_parallel_lm_head<double>(double*, double*, const double*, const double*,
                                               const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                               int64_t, double, const GroupReductions<double>&);

}  // namespace dscore::transformer::cpu
