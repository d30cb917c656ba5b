// The dispatch of core/device/ops.h: checks the arguments once, for both
// backends, then calls ops_cpu.cc or ops_cuda.cu.
#include <dscore/cpp/dtype.hpp>

#include <stdexcept>
#include <string>

#include "core/device/ops.h"
#include "core/device/ops_backends.h"

namespace dscore::device::ops {
namespace {

bool is_float(dscore_dtype d) {
  return d == DSCORE_DTYPE_F32 || d == DSCORE_DTYPE_BF16 || d == DSCORE_DTYPE_F16;
}

void check_count(const char* op, int64_t n) {
  if (n < 0)
    throw std::invalid_argument(std::string("device::ops::") + op + ": negative element count " +
                                std::to_string(n));
}

void check_float(const char* op, dscore_dtype dtype) {
  if (!is_float(dtype))
    throw std::invalid_argument(std::string("device::ops::") + op + ": dtype " +
                                sdk::dtype_name(dtype) + " is not fp32, bf16 or fp16");
}

void check_sized(const char* op, dscore_dtype dtype) {
  if (sdk::dtype_size(dtype) == 0)
    throw std::invalid_argument(std::string("device::ops::") + op + ": dtype " +
                                sdk::dtype_name(dtype) + " has no element size");
}

// True when the op goes to CUDA; throws when CUDA is asked of a build
// without it.
bool on_cuda(const char* op, Target target) {
  if (target.backend == Backend::kCpu) return false;
  if (!cuda_built())
    throw std::runtime_error(std::string("device::ops::") + op +
                             ": a CUDA target in a build without CUDA; rebuild dscore with "
                             "DSCORE_WITH_CUDA=ON (and nvcc on the PATH) or run on the CPU");
  return true;
}

}  // namespace

const char* backend_name(Backend backend) { return backend == Backend::kCuda ? "cuda" : "cpu"; }

bool cuda_built() {
#if defined(DSCORE_DEVICE_OPS_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

tensor::SquareSum to_square_sum(const SquareSumResult& r) {
  tensor::SquareSum s;
  s.hi = r.hi;
  s.lo = r.lo;
  s.non_finite = r.non_finite != 0;
  return s;
}

#if defined(DSCORE_DEVICE_OPS_WITH_CUDA)
#define DSCORE_OPS_CUDA(call) cuda::call
#else
// Never reached: on_cuda() throws first in builds without CUDA.
#define DSCORE_OPS_CUDA(call) throw std::logic_error("device::ops: no CUDA backend")
#endif

void convert(Target target, const void* src, dscore_dtype src_dtype, void* dst,
             dscore_dtype dst_dtype, int64_t n) {
  check_count("convert", n);
  check_float("convert", src_dtype);
  check_float("convert", dst_dtype);
  if (n == 0) return;
  if (on_cuda("convert", target))
    DSCORE_OPS_CUDA(convert(src, src_dtype, dst, dst_dtype, n, target.stream));
  else
    cpu::convert(src, src_dtype, dst, dst_dtype, n);
}

void fill_zero(Target target, void* data, dscore_dtype dtype, int64_t n) {
  check_count("fill_zero", n);
  check_sized("fill_zero", dtype);
  if (n == 0) return;
  if (on_cuda("fill_zero", target))
    DSCORE_OPS_CUDA(fill_zero(data, dtype, n, target.stream));
  else
    cpu::fill_zero(data, dtype, n);
}

void scale_in_place(Target target, void* data, dscore_dtype dtype, int64_t n, double factor) {
  check_count("scale_in_place", n);
  check_float("scale_in_place", dtype);
  if (n == 0) return;
  if (on_cuda("scale_in_place", target))
    DSCORE_OPS_CUDA(scale_in_place(data, dtype, n, factor, target.stream));
  else
    cpu::scale_in_place(data, dtype, n, factor);
}

void accumulate(Target target, void* dst, const void* src, dscore_dtype dtype, int64_t n) {
  check_count("accumulate", n);
  check_float("accumulate", dtype);
  if (n == 0) return;
  if (on_cuda("accumulate", target))
    DSCORE_OPS_CUDA(accumulate(dst, src, dtype, n, target.stream));
  else
    cpu::accumulate(dst, src, dtype, n);
}

void accumulate_into(Target target, void* dst, dscore_dtype dst_dtype, const void* src,
                     dscore_dtype src_dtype, int64_t n) {
  check_count("accumulate_into", n);
  check_float("accumulate_into", dst_dtype);
  check_float("accumulate_into", src_dtype);
  if (n == 0) return;
  if (on_cuda("accumulate_into", target))
    DSCORE_OPS_CUDA(accumulate_into(dst, dst_dtype, src, src_dtype, n, target.stream));
  else
    cpu::accumulate_into(dst, dst_dtype, src, src_dtype, n);
}

void copy(Target target, void* dst, const void* src, dscore_dtype dtype, int64_t n) {
  check_count("copy", n);
  check_sized("copy", dtype);
  if (n == 0) return;
  if (on_cuda("copy", target))
    DSCORE_OPS_CUDA(copy(dst, src, dtype, n, target.stream));
  else
    cpu::copy(dst, src, dtype, n);
}

size_t sum_squares_workspace_bytes(Backend backend) {
#if defined(DSCORE_DEVICE_OPS_WITH_CUDA)
  if (backend == Backend::kCuda) return cuda::sum_squares_workspace_bytes();
#else
  (void)backend;
#endif
  return 0;
}

void sum_squares(Target target, const void* data, dscore_dtype dtype, int64_t n,
                 SquareSumResult* out, void* workspace) {
  check_count("sum_squares", n);
  check_float("sum_squares", dtype);
  if (on_cuda("sum_squares", target)) {
    if (workspace == nullptr)
      throw std::invalid_argument(
          "device::ops::sum_squares: a CUDA target needs a workspace of "
          "sum_squares_workspace_bytes(Backend::kCuda) bytes of device memory");
    DSCORE_OPS_CUDA(sum_squares(data, dtype, n, out, workspace, target.stream));
  } else {
    cpu::sum_squares(data, dtype, n, out);
  }
}

}  // namespace dscore::device::ops
