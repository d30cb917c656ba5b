// Python's repr(float) in C++: the text DeepSpeed's csv_monitor writes for a
// value (csv.writer calls str() on a float, which is repr()).
#pragma once

#include <string>

namespace dscore::csv_monitor {

// Shortest digits that round-trip; scientific notation iff the decimal
// exponent is < -4 or >= 16 (e.g. 1e-05, 0.0001, 123.0, 1e+16); "inf",
// "-inf", "nan"; a ".0" on integral values; "-0.0" for negative zero.
std::string python_float_repr(double value);

}  // namespace dscore::csv_monitor
