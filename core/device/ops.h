// The buffer operations of the ZeRO step, on the host or on a CUDA stream:
// gradient statistics (sum of squares + Inf/NaN), conversion between fp32,
// bf16 and fp16 (the 16-bit parameter refresh), in-place scaling (pre/post
// division of reductions), accumulation, zero fill and copy. Every op takes
// raw pointers, a dtype, an element count and a Target saying where it runs.
//
// The CPU implementation IS the engine's host code (core/tensor/dtype_ops.h,
// core/tensor/square_sum.h), called unchanged. The CUDA implementation
// (ops_cuda.cu, built with DSCORE_WITH_CUDA) gives the same bytes for every
// elementwise op (conversions bit for bit even for NaN payloads; only a NaN
// that arithmetic creates, such as Inf - Inf, may carry another payload,
// the hardware's default NaN), and the sum of squares within one unit in
// the last place of a double (sum_squares below). Thread-safety: the ops keep no state;
// concurrent calls on different buffers are fine.
#pragma once

#include <dscore/plugin.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor/square_sum.h"

namespace dscore::device::ops {

enum class Backend { kCpu, kCuda };

// Where an op runs.
//   kCpu   at once, on the calling thread, over host memory; `stream` is
//          ignored (on the asynchronous CPU device the caller is already
//          the stream's worker).
//   kCuda  enqueued on `stream` (a cudaStream_t; nullptr = the legacy
//          default stream) over device memory of the current device; the
//          call returns before the work is done and never synchronises.
struct Target {
  Backend backend = Backend::kCpu;
  void* stream = nullptr;

  static Target cpu() { return {}; }
  static Target cuda(void* stream) { return {Backend::kCuda, stream}; }
};

const char* backend_name(Backend backend);  // "cpu", "cuda"
// Whether this build has the CUDA implementations (DSCORE_WITH_CUDA).
bool cuda_built();

// Failures, on both backends:
//  - std::invalid_argument for a negative count, or a dtype the op does not
//    take (conversion, scaling, accumulation and sums take fp32, bf16 and
//    fp16; fill_zero and copy any dtype with a size), naming the op;
//  - std::runtime_error for kCuda in a build without CUDA, and for a CUDA
//    launch or enqueue error (the message names the CUDA call and its
//    error). Errors of the kernels themselves surface at the next
//    synchronisation of the stream, as with any CUDA work.
// A count of 0 does nothing.

// dst[i] = src[i] converted, rounding to nearest even (NaN stays NaN,
// overflow goes to infinity); a plain copy when the dtypes match.
void convert(Target target, const void* src, dscore_dtype src_dtype, void* dst,
             dscore_dtype dst_dtype, int64_t n);
// +0 in every float format.
void fill_zero(Target target, void* data, dscore_dtype dtype, int64_t n);
// data[i] *= factor, with factor rounded to fp32 once and the product
// rounded once to the buffer's dtype; nothing when factor == 1.
void scale_in_place(Target target, void* data, dscore_dtype dtype, int64_t n, double factor);
// dst[i] += src[i], both of `dtype`, in fp32, rounded once.
void accumulate(Target target, void* dst, const void* src, dscore_dtype dtype, int64_t n);
// dst[i] += src[i] across dtypes (a bf16/fp16 gradient into an fp32
// accumulation buffer): both read as fp32, added, rounded once to
// dst_dtype. The same dtypes give accumulate()'s bytes.
void accumulate_into(Target target, void* dst, dscore_dtype dst_dtype, const void* src,
                     dscore_dtype src_dtype, int64_t n);
// dst[i] = src[i], the same dtype.
void copy(Target target, void* dst, const void* src, dscore_dtype dtype, int64_t n);

// tensor::SquareSum as it lies in memory of the target (host memory for
// kCpu, device memory for kCuda), so the engine can copy every scalar of
// a step back to the host at once, with no device-wide synchronisation.
struct SquareSumResult {
  double hi = 0;
  double lo = 0;
  int32_t non_finite = 0;  // 1 when an element was Inf or NaN
  int32_t reserved = 0;
};
static_assert(sizeof(SquareSumResult) == 24, "SquareSumResult is copied as raw bytes");

tensor::SquareSum to_square_sum(const SquareSumResult& r);

// Bytes of scratch memory sum_squares needs on kCuda (a few KiB; nothing
// on kCpu).
size_t sum_squares_workspace_bytes(Backend backend);

// *out = the compensated sum of squares of n elements of `data` (fp32,
// bf16 or fp16) and whether one was Inf or NaN (tensor::sum_squares).
//
// kCpu: tensor::sum_squares itself; `workspace` is ignored.
// kCuda: two kernels on the stream, no atomics: a fixed grid (a function of
// n only, not of the GPU) where each thread keeps a TwoSum-compensated
// (hi, lo) pair over a fixed stride of elements, pairs merged by a
// fixed-shape tree in each block, then one block merges the block results
// the same way. Deterministic: the same input gives the same bytes on every
// run and every GPU. Both backends sum the exact squares (an fp32 value
// squared is exact in double) with compensation, hi + lo within far less
// than 2^-60 relative of the exact sum for any realistic n, so value()
// (hi + lo rounded once) differs from the CPU's by at most one unit in the
// last place of a double (2^-52 relative), and only when the exact sum lies
// that close to a rounding boundary; hi and lo may differ individually.
// non_finite is always equal. `out` and `workspace` (sum_squares_workspace_bytes bytes)
// are device memory; the workspace must not be used by other work in
// flight.
void sum_squares(Target target, const void* data, dscore_dtype dtype, int64_t n,
                 SquareSumResult* out, void* workspace);

}  // namespace dscore::device::ops
