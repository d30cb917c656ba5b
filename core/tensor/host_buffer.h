// Counted host buffers sized in elements of a dtype: the one place core code
// turns "allocate N elements for <buffer>" into memory, and allocation
// failure into a Status (RESOURCE_EXHAUSTED naming the buffer and its size)
// rather than a std::bad_alloc thrown through a Status API.
#pragma once

#include <dscore/plugin.h>

#include <dscore/cpp/dtype.hpp>

#include <cstdint>
#include <string_view>

#include "core/base/memory.h"
#include "core/base/status.h"

namespace dscore::tensor {

enum class Fill {
  kZero,           // every element +0 (the usual case: gradients, buckets, state)
  kUninitialised,  // the caller overwrites every byte before reading any
};

// A host buffer of max(elements, 1) elements of `dtype`, recorded in the
// memory ledger as `use` under `name`. Fails with RESOURCE_EXHAUSTED
// "could not allocate <bytes> bytes (<human>) for <name>" when the memory is
// not there or the size does not fit in size_t. Thread-safe.
Result<CountedBuffer> allocate_elements(int64_t elements, dscore_dtype dtype, MemoryUse use,
                                        std::string_view name, Fill fill = Fill::kZero);

// The same for a byte count (raw staging memory).
Result<CountedBuffer> allocate_bytes(size_t bytes, MemoryUse use, std::string_view name);

// Byte address of element `index` of a flat buffer of `dtype`.
inline char* element_at(void* base, dscore_dtype dtype, int64_t index) {
  return static_cast<char*>(base) + index * static_cast<int64_t>(sdk::dtype_size(dtype));
}

}  // namespace dscore::tensor
