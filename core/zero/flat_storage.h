// The memory ZeRO stages 0-2 share: every parameter back to back in one
// flat, padded buffer (partition.h FlatPartition), the fp32 master weights of
// the owned range, and the per-parameter views lent to the model. Which range
// a rank owns is the only stage difference here: all of it (stage 0,
// replicated) or its partition (stages 1/2). Gradient memory belongs to the
// GradientReduction (gradient_reduction.h), which points grad views into it.
#pragma once

#include <dscore/model.h>

#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/zero/param_layout.h"
#include "core/zero/partition.h"
#include "core/zero/zero_strategy.h"

namespace dscore::zero {

enum class Ownership {
  kReplicated,   // stage 0: every rank owns (and updates) the whole flat space
  kPartitioned,  // stages 1/2: rank r owns partition r
};

class FlatStorage {
 public:
  // `master_elsewhere`: keep no fp32 master (zero_strategy.h ZeroContext).
  FlatStorage(const ParamLayout& layout, dscore_dtype model_dtype, dscore_dtype grad_dtype,
              int rank, int world, Ownership ownership, bool master_elsewhere = false);
  FlatStorage(const FlatStorage&) = delete;
  FlatStorage& operator=(const FlatStorage&) = delete;

  // Allocate the parameters and master weights (zeroed) from `device`
  // (zero_memory.h; host memory when null) and build the views; grad views
  // start null until a GradientReduction points them.
  Status allocate(device::Device* device = nullptr);
  // Initialise the owned range through the model's init_param, a function
  // of (seed, parameter, element), so every world size gets the same model;
  // uploaded with copies on `stream` (zero_strategy.h init_owned).
  Status initialise_owned(const Model& model, device::Device* device = nullptr,
                          device::Stream* stream = nullptr);

  const ParamLayout& layout() const { return *layout_; }
  const FlatPartition& partition() const { return partition_; }
  dscore_dtype model_dtype() const { return model_dtype_; }
  dscore_dtype grad_dtype() const { return grad_dtype_; }
  int rank() const { return rank_; }
  bool replicated() const { return ownership_ == Ownership::kReplicated; }

  // --- owned space: flat range [owned_begin, owned_end)
  int64_t owned_begin() const { return owned_begin_; }
  int64_t owned_end() const { return owned_end_; }
  int64_t owned_numel() const { return owned_end_ - owned_begin_; }
  const std::vector<OwnedSegment>& segments() const { return segments_; }
  // What this rank writes into its optimizer-state shard: its owned
  // segments, clipped to its partition when it owns everything.
  std::vector<OwnedSegment> checkpoint_segments() const;
  // This rank's share of the gradient norm in owned-space offsets: its
  // partition, so the partial sums of all ranks cover each element once.
  std::pair<int64_t, int64_t> norm_range() const;

  void* params() { return params_.data(); }  // (padded) model_dtype
  float* owned_master();                     // (owned) fp32
  void* owned_params16();                    // (owned) model_dtype, nullptr for fp32 models
  // The whole fp32 master, in flat order, when this rank holds all of it
  // (fp32 model, or replicated); nullptr otherwise.
  const float* full_master() const;

  // --- views lent to the model
  const dscore_tensor* const* param_ptrs(size_t first_param) const {
    return param_ptrs_.data() + first_param;
  }
  dscore_tensor* const* grad_ptrs(size_t first_param) const {
    return grad_ptrs_.data() + first_param;
  }
  // Point the grad views of params [first, end) into `memory`, whose
  // element 0 is flat index `window`.
  void point_grads(size_t first, size_t end, void* memory, int64_t window);
  // Flat range [begin, end) of a layer's parameters.
  std::pair<int64_t, int64_t> layer_range(size_t layer) const;

 private:
  const ParamLayout* layout_;
  dscore_dtype model_dtype_, grad_dtype_;
  int rank_;
  Ownership ownership_;
  bool master_elsewhere_ = false;
  FlatPartition partition_;
  int64_t owned_begin_ = 0, owned_end_ = 0;
  std::vector<OwnedSegment> segments_;

  device::Buffer params_;  // (padded) model_dtype: what the model reads
  device::Buffer master_;  // (owned) fp32, only for 16-bit models

  std::vector<dscore_tensor> param_views_, grad_views_;  // per parameter
  std::vector<const dscore_tensor*> param_ptrs_;
  std::vector<dscore_tensor*> grad_ptrs_;
};

}  // namespace dscore::zero
