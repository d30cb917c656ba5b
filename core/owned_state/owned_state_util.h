// Small helpers shared by the owned-state sources (private to core/owned_state).
#pragma once

#include <dscore/cpp/dtype.hpp>

#include <cstddef>
#include <cstdint>

namespace dscore {

// Bytes of `elements` values of `dtype`.
inline size_t size_of(int64_t elements, dscore_dtype dtype) {
  return static_cast<size_t>(elements) * sdk::dtype_size(dtype);
}

}  // namespace dscore
