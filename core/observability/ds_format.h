// Numbers as DeepSpeed's Python code computes and prints them, so dscore's
// observability output reads the same: round(x, n), '{:g}', '{:.2f}',
// left-aligned '{:<20}' columns, and deepspeed.utils.timer.trim_mean.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dscore::observability {

// Python's round(x, ndigits) for floats: the decimal nearest to the exact
// binary value, ties to even (via the correctly rounded "%.*f").
double python_round(double x, int ndigits);

// Python's format(x, 'g') (6 significant digits, C's %g rules).
std::string format_g(double x);

// Python's format(x, '.<precision>f').
std::string format_fixed(double x, int precision);

// Python's repr(float) ("0.1", "1e-05", "4.0").
std::string format_repr(double x);

// Python's format(text, '<width>'): left-aligned, padded with spaces, never
// truncated.
std::string pad_right(std::string_view text, size_t width);

// deepspeed.utils.timer.trim_mean: sort, drop k = int(round(n * fraction))
// values from each end (round half to even, as Python's round), mean of the
// rest; 0 for an empty list.
double trim_mean(std::vector<double> values, double fraction);

}  // namespace dscore::observability
