#include "core/data/batch.h"

#include <dscore/cpp/dtype.hpp>

namespace dscore::data {

HostBatch::HostBatch(const dscore_model_description& description, int64_t batch_size) {
  const size_t n = description.input_count;
  shapes_.resize(n);
  tensors_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const dscore_model_input* input = description.inputs[i];
    std::vector<int64_t>& shape = shapes_[i];
    shape.push_back(batch_size);
    int64_t numel = batch_size;
    for (int32_t d = 0; d < input->ndim; ++d) {
      shape.push_back(input->shape[d]);
      numel *= input->shape[d];
    }
    const size_t bytes = static_cast<size_t>(numel) * sdk::dtype_size(input->dtype);
    buffers_.push_back(make_counted_buffer(bytes, DSCORE_MEMORY_HOST, MemoryUse::kOther, "batch"));
    dscore_tensor& t = tensors_[i];
    t.struct_size = sizeof t;
    t.data = buffers_.back().get();
    t.dtype = input->dtype;
    t.device_type = DSCORE_DEVICE_CPU;
    t.ndim = static_cast<int32_t>(shape.size());
    t.shape = shape.data();
    t.numel = numel;
    t.name = input->name;
  }
  for (dscore_tensor& t : tensors_) pointers_.push_back(&t);
  view_.struct_size = sizeof view_;
  view_.batch_size = batch_size;
  view_.count = n;
  view_.tensors = pointers_.data();
}

}  // namespace dscore::data
