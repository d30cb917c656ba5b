// ZeRO stage 3's storage: every parameter partitioned on its own
// (partition.h ShardedLayout), a rank keeping only its shards of the 16-bit
// parameters (in memory, pinned host memory with offload_param "cpu" from a
// GPU, or a swap file with offload_param "nvme": param_swap.h) and, unless
// the optimizer state is offloaded, of the fp32 master weights. It also
// holds the model's views, one per parameter, that the gathers
// (sharded_gathers.h) and the gradient reduce-scatter
// (sharded_reduce_scatter.h) point at what they lend.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/device/device.h"
#include "core/zero/param_swap.h"
#include "core/zero/partition.h"
#include "core/zero/swapped_gathers.h"
#include "core/zero/zero_strategy.h"

namespace dscore::zero {

class ShardedStorage {
 public:
  explicit ShardedStorage(const ZeroContext& context);

  // The shards' memory (or swap file) and the master, then their initial
  // values through the model's init_param: each rank writes only its shards.
  Status allocate();
  Status initialise_owned(const Model& model);

  const ShardedLayout& shards() const { return shards_; }
  int64_t local_numel() const { return shards_.local_numel; }
  const std::vector<OwnedSegment>& segments() const { return segments_; }
  // Elements of `param` gathered: its shard size times the world.
  int64_t padded(size_t param) const;
  int64_t padded_layer_elements(size_t layer) const;  // over all the layer's params
  // Small parameters kept gathered for the run (stage3_param_persistence_threshold,
  // within stage3_model_persistence_threshold in total).
  bool persistent(size_t param) const { return persistent_[param] != 0; }

  float* owned_master();   // fp32: the parameters; 16-bit: the master, or nullptr elsewhere
  void* owned_params16();  // nullptr for fp32 models and swapped shards
  ParamSwap* param_swap() { return param_swap_.get(); }
  bool swaps_params() const { return param_swap_ != nullptr; }
  // Swapped shards read ahead of their allgathers into device memory (from a GPU).
  SwappedGathers* swapped() { return swapped_.get(); }

  // `run(begin, at, count)` for each run of `params` whose shards follow
  // each other in the local space: local elements [begin, begin + count)
  // go to element `at` of the shards packed back to back.
  Status for_each_local_run(
      const std::vector<size_t>& params,
      const std::function<Status(int64_t begin, int64_t at, int64_t count)>& run) const;
  // This rank's shards of `params` packed back to back into `packed`, from
  // memory or the swap file (contiguous shards in one read). On the comm
  // stream's thread.
  Status pack_shards(const std::vector<size_t>& params, char* packed);

  // The model's views (param_layout.h): data set by whoever lends them.
  dscore_tensor& param_view(size_t param) { return param_views_[param]; }
  dscore_tensor& grad_view(size_t param) { return grad_views_[param]; }
  const dscore_tensor* const* param_ptrs(size_t first) { return param_ptrs_.data() + first; }
  dscore_tensor* const* grad_ptrs(size_t first) { return grad_ptrs_.data() + first; }

  // The shards as a checkpoint writes them (ZeroStrategy::checkpoint_params).
  std::vector<ParamRun> checkpoint_params();

 private:
  Status initialise_swapped(const Model& model);

  ZeroContext ctx_;
  int rank_, world_;
  ShardedLayout shards_;
  std::vector<OwnedSegment> segments_;
  std::vector<char> persistent_;

  device::Buffer param_part_;              // (local) model_dtype shards, unless swapped
  std::unique_ptr<ParamSwap> param_swap_;  // offload_param nvme: the shards' file
  std::unique_ptr<SwappedGathers> swapped_;
  device::Buffer master_;  // (local) fp32, 16-bit models only

  std::vector<dscore_tensor> param_views_, grad_views_;
  std::vector<const dscore_tensor*> param_ptrs_;
  std::vector<dscore_tensor*> grad_ptrs_;
};

}  // namespace dscore::zero
