#include "core/tensor/host_buffer.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/base/strings.h"

namespace dscore::tensor {
namespace {

Status exhausted(const std::string& size, std::string_view name) {
  return Status(DSCORE_RESOURCE_EXHAUSTED,
                "could not allocate " + size + " for " + std::string(name));
}

}  // namespace

Result<CountedBuffer> allocate_bytes(size_t bytes, MemoryUse use, std::string_view name) {
  CountedBuffer buffer = make_counted_buffer(bytes, DSCORE_MEMORY_HOST, use, name);
  if (!buffer)
    return exhausted(std::to_string(bytes) + " bytes (" + format_bytes(bytes) + ")", name);
  return buffer;
}

Result<CountedBuffer> allocate_elements(int64_t elements, dscore_dtype dtype, MemoryUse use,
                                        std::string_view name, Fill fill) {
  const size_t es = sdk::dtype_size(dtype);
  const uint64_t count = static_cast<uint64_t>(std::max<int64_t>(elements, 1));
  if (es == 0 || count > std::numeric_limits<size_t>::max() / es)
    return exhausted(std::to_string(count) + " elements of " + sdk::dtype_name(dtype) +
                         " (more bytes than the address space holds)",
                     name);
  const size_t bytes = static_cast<size_t>(count) * es;
  DSCORE_ASSIGN_OR_RETURN(CountedBuffer buffer, allocate_bytes(bytes, use, name));
  if (fill == Fill::kZero) std::memset(buffer.get(), 0, bytes);  // +0 in every float format
  return buffer;
}

}  // namespace dscore::tensor
