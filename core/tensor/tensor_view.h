// Host tensor views: a dscore_tensor describing memory the caller owns, as
// the C ABI hands it to plugins (models, optimizers). The view borrows
// `shape` and `name`; both must outlive it.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <vector>

namespace dscore::tensor {

inline dscore_tensor host_view(void* data, dscore_dtype dtype, const std::vector<int64_t>& shape,
                               int64_t numel, const char* name = nullptr) {
  dscore_tensor t{};
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = dtype;
  t.device_type = DSCORE_DEVICE_CPU;
  t.ndim = static_cast<int32_t>(shape.size());
  t.shape = shape.data();
  t.numel = numel;
  t.name = name;
  return t;
}

}  // namespace dscore::tensor
