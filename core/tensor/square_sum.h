// The gradient statistics the boundary step needs: a compensated sum of
// squares and the non-finite check, over a flat buffer of any float dtype
// (fp32, fp16, bf16). The elementwise buffer operations (conversion,
// scaling, accumulation) are beside it in dtype_ops.h.
#pragma once

#include <dscore/plugin.h>
#include <dscore/cpp/cpu_isa.hpp>

#include <cstdint>

namespace dscore::tensor {

// A sum of squares kept as an unevaluated pair hi + lo (TwoSum
// compensation), so partial sums over different splits of the same
// elements round to the same double: the norm does not depend on how ZeRO
// partitions the gradient.
struct SquareSum {
  double hi = 0;
  double lo = 0;
  bool non_finite = false;  // an Inf or NaN was seen

  void add(double x);
  void merge(const SquareSum& other);  // also in a fixed (rank) order
  double value() const { return hi + lo; }
};

// On the widest vector ISA the CPU has (square_sum_isa(); DSCORE_CPU_ISA
// lowers it). Every ISA gives the same bits.
SquareSum sum_squares(const void* data, dscore_dtype dtype, int64_t n);
SquareSum sum_squares(const void* data, dscore_dtype dtype, int64_t n, sdk::CpuIsa isa);
sdk::CpuIsa square_sum_isa();

}  // namespace dscore::tensor
