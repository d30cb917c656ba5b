// Helpers for checking a kernel's backward against central finite
// differences of its forward, in double precision: the scalar checked is
// sum(out * R) for a fixed random R, so d/d(out) = R is what backward gets.
// Tolerance: |analytic - numeric| <= 1e-6 * max(1, |numeric|) (the
// differences' truncation error at h = 1e-5 is ~1e-10 relative).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace dscore::transformer::testing {

using Vec = std::vector<double>;

inline Vec random_vec(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic[i] against d f / d x[i] by central differences.
inline void expect_gradient(const char* what, Vec* x, const Vec& analytic,
                            const std::function<double()>& f) {
  ASSERT_EQ(x->size(), analytic.size()) << what;
  const double h = 1e-5;
  for (size_t i = 0; i < x->size(); ++i) {
    const double keep = (*x)[i];
    (*x)[i] = keep + h;
    const double up = f();
    (*x)[i] = keep - h;
    const double down = f();
    (*x)[i] = keep;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
        << what << "[" << i << "]";
  }
}

}  // namespace dscore::transformer::testing
