// Python's repr(float) in C++: the text DeepSpeed writes for a float (its
// csv_monitor rows, the lr=[...] of its progress lines). Header-only, shared
// by plugins and the host; nothing here crosses the ABI.
//
// std::to_chars gives the shortest round-trip digits (as Python's dtoa mode
// 0 does); python_float_repr lays them out with the rules of CPython's
// format_float_short for repr ('r' format, Py_DTSF_ADD_DOT_0).
#ifndef DSCORE_CPP_PYTHON_FLOAT_HPP_
#define DSCORE_CPP_PYTHON_FLOAT_HPP_

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>

namespace dscore::sdk {

// Shortest digits that round-trip; scientific notation iff the decimal
// exponent is < -4 or >= 16 (e.g. 1e-05, 0.0001, 123.0, 1e+16); "inf",
// "-inf", "nan"; a ".0" on integral values; "-0.0" for negative zero.
inline std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";

  // "d.ddde±XX": digits and the exponent of the first digit.
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string_view text(buffer, static_cast<size_t>(result.ptr - buffer));
  std::string sign;
  if (!text.empty() && text[0] == '-') {
    sign = "-";
    text.remove_prefix(1);
  }
  size_t e_pos = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e_pos))
    if (c != '.') digits += c;
  int exponent = std::atoi(std::string(text.substr(e_pos + 1)).c_str());
  // CPython's decpt: value = 0.d1d2... * 10^decpt.
  const int decpt = exponent + 1;
  const int n = static_cast<int>(digits.size());

  if (decpt <= -4 || decpt > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    std::string exp_digits = std::to_string(std::abs(exponent));
    if (exp_digits.size() < 2) exp_digits = "0" + exp_digits;
    return out + "e" + (exponent < 0 ? "-" : "+") + exp_digits;
  }
  if (decpt <= 0) return sign + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  if (decpt >= n) return sign + digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
  return sign + digits.substr(0, static_cast<size_t>(decpt)) + "." +
         digits.substr(static_cast<size_t>(decpt));
}

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_PYTHON_FLOAT_HPP_
