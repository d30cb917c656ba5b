// Tests of sdk/include/dscore/cpp/python_float.hpp: the expected strings are
// what CPython 3 prints for repr() of the same doubles (checked with python3).
#include <dscore/cpp/python_float.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace dscore::sdk {
namespace {

TEST(PythonFloatReprTest, MatchesCPythonRepr) {
  struct Case {
    double value;
    const char* repr;
  };
  const Case cases[] = {
      {1e-05, "1e-05"},    // exponent -5 < -4: scientific
      {0.0001, "0.0001"},  // exponent -4: fixed
      {0.00012, "0.00012"},
      {1e16, "1e+16"},               // exponent 16: scientific
      {1e15, "1000000000000000.0"},  // exponent 15: fixed
      {9999999999999998.0, "9999999999999998.0"},
      {123.0, "123.0"},
      {0.5, "0.5"},
      {0.1, "0.1"},
      {1.0 / 3, "0.3333333333333333"},
      {2.0 / 3, "0.6666666666666666"},
      {0.1 + 0.2, "0.30000000000000004"},
      {1.5e-7, "1.5e-07"},
      {12345678901234567890.0, "1.2345678901234567e+19"},
      {1152921504606846976.0, "1.152921504606847e+18"},  // 2^60
      {9.5367431640625e-07, "9.5367431640625e-07"},      // 2^-20
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {-2.5, "-2.5"},
      {3.14159, "3.14159"},
      {100.5, "100.5"},
      {65504.0, "65504.0"},
      {1e22, "1e+22"},
      {-1e-300, "-1e-300"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {-std::numeric_limits<double>::infinity(), "-inf"},
      {std::nan(""), "nan"},
      {-std::nan(""), "nan"},
  };
  for (const Case& c : cases) EXPECT_EQ(python_float_repr(c.value), c.repr);
}

TEST(PythonFloatReprTest, RoundTripsRandomDoubles) {
  // Shortest digits are still exact: parsing the text gives the same double.
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 20000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double v;
    std::memcpy(&v, &x, sizeof v);
    if (!std::isfinite(v)) continue;
    std::string s = python_float_repr(v);
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), v) << s;
  }
}

}  // namespace
}  // namespace dscore::sdk
