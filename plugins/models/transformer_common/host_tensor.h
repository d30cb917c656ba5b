// A dense tensor over host memory, as the model plugins hand it to the
// communicator groups the host lends (tensor_parallel.h, sequence_parallel.h).
#pragma once

#include <dscore/plugin.h>

#include <cstdint>

namespace dscore::transformer {

inline dscore_tensor host_tensor(void* data, dscore_dtype dtype, int64_t n) {
  dscore_tensor t{};
  t.struct_size = sizeof(dscore_tensor);
  t.data = data;
  t.dtype = dtype;
  t.numel = n;
  t.device_type = DSCORE_DEVICE_CPU;
  return t;
}

}  // namespace dscore::transformer
