// Optional header-only helper for comm plugins: ordered reductions. Combine
// W chunks that arrived in rank order, always as ((c0 op c1) op c2) ...,
// computing in fp32 for 16-bit data, so a result never depends on timing or
// on the transport's algorithm: what comm.h asks of a backend, and what makes
// ZeRO stages bitwise comparable at a fixed world size. The mpi and loopback
// backends share it. Nothing here crosses the ABI.
#ifndef DSCORE_CPP_ORDERED_REDUCE_HPP_
#define DSCORE_CPP_ORDERED_REDUCE_HPP_

#include <dscore/comm.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dscore::sdk {

namespace detail {

template <typename Acc>
inline Acc apply(dscore_reduce_op op, Acc a, Acc b) {
  switch (op) {
    case DSCORE_REDUCE_SUM:
    case DSCORE_REDUCE_AVG:
      return a + b;
    case DSCORE_REDUCE_PRODUCT:
      return a * b;
    case DSCORE_REDUCE_MIN:
      return std::min(a, b);
    case DSCORE_REDUCE_MAX:
      return std::max(a, b);
    default:
      throw sdk::Error(DSCORE_INVALID_ARGUMENT, "unknown reduce op " + std::to_string(op));
  }
}

// The elements reduce_typed sums at a time.
inline constexpr int64_t kReduceTile = 2048;

// Storage type T, accumulated in Acc, rank by rank, a tile at a time (the
// tile's sums in `a`, kReduceTile elements, stay in cache from the first
// chunk to the store), so the inner loops vectorise and the association
// order is fixed.
template <typename T, typename Acc, typename Load, typename Store>
void reduce_typed(const T* chunks, int world, int64_t n, dscore_reduce_op op, T* out, Acc* a,
                  Load load, Store store) {
  for (int64_t t0 = 0; t0 < n; t0 += kReduceTile) {
    const int64_t m = std::min(kReduceTile, n - t0);
    for (int64_t i = 0; i < m; ++i) a[i] = load(chunks[t0 + i]);
    for (int r = 1; r < world; ++r) {
      const T* c = chunks + static_cast<int64_t>(r) * n + t0;
      if (op == DSCORE_REDUCE_SUM || op == DSCORE_REDUCE_AVG) {
        for (int64_t i = 0; i < m; ++i) a[i] = a[i] + load(c[i]);
      } else {
        for (int64_t i = 0; i < m; ++i) a[i] = detail::apply<Acc>(op, a[i], load(c[i]));
      }
    }
    if (op == DSCORE_REDUCE_AVG) {
      const Acc w = static_cast<Acc>(world);
      for (int64_t i = 0; i < m; ++i) a[i] = a[i] / w;
    }
    for (int64_t i = 0; i < m; ++i) out[t0 + i] = store(a[i]);
  }
}

}  // namespace detail

// chunks: world x n elements of `dtype`, chunk r from rank r. out: n
// elements. `scratch` is fp32/fp64 working space the function may resize.
// Throws sdk::Error for a dtype/op it cannot reduce.
inline void reduce_chunks(const void* chunks, int world, int64_t n, dscore_dtype dtype,
                          dscore_reduce_op op, void* out, std::vector<double>* scratch) {
  // The scratch is double-typed storage, grown to what the accumulator
  // needs: a tile of floats (fp32, bf16, fp16) or of doubles (fp64, int32).
  const size_t tile = static_cast<size_t>(std::min(n, detail::kReduceTile));
  auto floats = [&] {
    if (scratch->size() < (tile + 1) / 2) scratch->resize((tile + 1) / 2);
    return reinterpret_cast<float*>(scratch->data());
  };
  auto doubles = [&] {
    if (scratch->size() < tile) scratch->resize(tile);
    return scratch->data();
  };
  auto same_f = [](float v) { return v; };
  auto same_d = [](double v) { return v; };
  switch (dtype) {
    case DSCORE_DTYPE_F32:
      detail::reduce_typed(static_cast<const float*>(chunks), world, n, op,
                           static_cast<float*>(out), floats(), same_f, same_f);
      return;
    case DSCORE_DTYPE_F64:
      detail::reduce_typed(static_cast<const double*>(chunks), world, n, op,
                           static_cast<double*>(out), doubles(), same_d, same_d);
      return;
    case DSCORE_DTYPE_BF16:
      detail::reduce_typed(
          static_cast<const uint16_t*>(chunks), world, n, op, static_cast<uint16_t*>(out), floats(),
          [](uint16_t v) { return sdk::bf16_to_float(v); },
          [](float v) { return sdk::float_to_bf16(v); });
      return;
    case DSCORE_DTYPE_F16:
      detail::reduce_typed(static_cast<const uint16_t*>(chunks), world, n, op,
                           static_cast<uint16_t*>(out), floats(), &sdk::half_to_float,
                           &sdk::float_to_half);
      return;
    case DSCORE_DTYPE_I32:
      detail::reduce_typed(
          static_cast<const int32_t*>(chunks), world, n, op, static_cast<int32_t*>(out), doubles(),
          [](int32_t v) { return static_cast<double>(v); },
          [](double v) { return static_cast<int32_t>(v); });
      return;
    case DSCORE_DTYPE_I64: {
      // int64 through an int64 accumulator: exact.
      std::vector<int64_t> acc(tile);
      auto same_i = [](int64_t v) { return v; };
      detail::reduce_typed(static_cast<const int64_t*>(chunks), world, n, op,
                           static_cast<int64_t*>(out), acc.data(), same_i, same_i);
      return;
    }
    default:
      throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                       std::string("cannot reduce tensors of dtype ") + sdk::dtype_name(dtype));
  }
}

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_ORDERED_REDUCE_HPP_
