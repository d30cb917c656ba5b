// A host-side batch: one tensor per model input (leading dimension = batch
// size), allocated once and refilled per micro-batch, with the dscore_batch
// view a model receives.
#pragma once

#include <dscore/model.h>

#include <memory>
#include <vector>

#include "core/base/memory.h"

namespace dscore::data {

class HostBatch {
 public:
  HostBatch(const dscore_model_description& description, int64_t batch_size);
  HostBatch(const HostBatch&) = delete;
  HostBatch& operator=(const HostBatch&) = delete;

  const dscore_batch& view() const { return view_; }
  int64_t batch_size() const { return view_.batch_size; }
  dscore_tensor& tensor(size_t i) { return tensors_[i]; }
  size_t size() const { return tensors_.size(); }

 private:
  std::vector<CountedBuffer> buffers_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<dscore_tensor> tensors_;
  std::vector<const dscore_tensor*> pointers_;
  dscore_batch view_{};
};

}  // namespace dscore::data
