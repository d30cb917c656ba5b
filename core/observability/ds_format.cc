#include "core/observability/ds_format.h"

#include <dscore/cpp/python_float.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dscore::observability {

double python_round(double x, int ndigits) {
  if (!std::isfinite(x)) return x;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", ndigits, x);
  return std::strtod(buf, nullptr);
}

std::string format_g(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

std::string format_fixed(double x, int precision) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", precision, x);
  return buf;
}

std::string format_repr(double x) { return sdk::python_float_repr(x); }

std::string pad_right(std::string_view text, size_t width) {
  std::string out(text);
  if (out.size() < width) out.append(width - out.size(), ' ');
  return out;
}

double trim_mean(std::vector<double> values, double fraction) {
  const size_t n = values.size();
  if (n == 0) return 0;
  std::sort(values.begin(), values.end());
  // std::nearbyint rounds half to even in the default rounding mode, as
  // Python's round() does: n = 5 trims 0 (round(0.5) == 0), n = 15 trims 2.
  const auto k = static_cast<size_t>(std::nearbyint(static_cast<double>(n) * fraction));
  if (2 * k >= n) return std::nan("");  // numpy's mean of an empty slice
  double sum = 0;
  for (size_t i = k; i < n - k; ++i) sum += values[i];
  return sum / static_cast<double>(n - 2 * k);
}

}  // namespace dscore::observability
