#include "core/zero/zero_memory.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

namespace dscore::zero {
namespace {

Status copy_and_wait(device::Device* device, device::Stream* stream, void* dst, const void* src,
                     size_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (device == nullptr || stream == nullptr) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  device->copy(dst, src, bytes, *stream);
  return stream->synchronize();
}

Status too_large(uint64_t count, dscore_dtype dtype, std::string_view name) {
  return Status(DSCORE_RESOURCE_EXHAUSTED, "could not allocate " + std::to_string(count) +
                                               " elements of " + sdk::dtype_name(dtype) +
                                               " (more bytes than the address space holds) for " +
                                               std::string(name));
}

}  // namespace

Result<device::Buffer> allocate_buffer(device::Device* device, int64_t elements, dscore_dtype dtype,
                                       MemoryUse use, std::string_view name, tensor::Fill fill,
                                       device::Placement placement) {
  if (device == nullptr) {
    DSCORE_ASSIGN_OR_RETURN(CountedBuffer host,
                            tensor::allocate_elements(elements, dtype, use, name, fill));
    const size_t bytes =
        static_cast<size_t>(std::max<int64_t>(elements, 1)) * sdk::dtype_size(dtype);
    return device::Buffer(host.release(), bytes, device::Placement::kHost,
                          [](void* p) { counted_free(p, DSCORE_MEMORY_HOST); });
  }
  const size_t es = sdk::dtype_size(dtype);
  const uint64_t count = static_cast<uint64_t>(std::max<int64_t>(elements, 1));
  if (es == 0 || count > std::numeric_limits<size_t>::max() / es)
    return too_large(count, dtype, name);
  return device->allocate(static_cast<size_t>(count) * es, placement, use, name,
                          fill == tensor::Fill::kZero);
}

comm::CommBuffer device_buffer(const device::Device* device, void* data, dscore_dtype dtype,
                               int64_t numel) {
  comm::CommBuffer buffer{data, dtype, numel};
  if (device != nullptr) {
    buffer.device_type = device->tensor_device_type();
    buffer.device_id = device->index();
  }
  return buffer;
}

void place_view(dscore_tensor* view, const device::Device* device) {
  if (device == nullptr) return;
  view->device_type = device->tensor_device_type();
  view->device_id = device->index();
}

Result<device::Buffer> allocate_scratch(device::Device* device, device::Stream* stream,
                                        int64_t elements, dscore_dtype dtype, MemoryUse use,
                                        std::string_view name) {
  if (device == nullptr || stream == nullptr)
    return allocate_buffer(nullptr, elements, dtype, use, name, tensor::Fill::kUninitialised);
  const size_t es = sdk::dtype_size(dtype);
  const uint64_t count = static_cast<uint64_t>(std::max<int64_t>(elements, 1));
  if (es == 0 || count > std::numeric_limits<size_t>::max() / es)
    return too_large(count, dtype, name);
  return device->allocate_scratch(static_cast<size_t>(count) * es, *stream, use, name);
}

Status upload(device::Device* device, device::Stream* stream, void* dst, const void* src,
              size_t bytes) {
  return copy_and_wait(device, stream, dst, src, bytes);
}

Status download(device::Device* device, device::Stream* stream, void* dst, const void* src,
                size_t bytes) {
  return copy_and_wait(device, stream, dst, src, bytes);
}

}  // namespace dscore::zero
