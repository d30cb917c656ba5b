// ZeRO under expert parallelism (docs/moe.md#expert-parallelism): the
// model's parameters in two domains, each under the stage's own strategy
// (FlatZero or ShardedZero) over its own group:
//   dense   every parameter but the experts', over ZeRO's group (all the
//           data-parallel ranks), averaged over them;
//   experts the DSCORE_PARAM_EXPERT ones, over the expert-data-parallel
//           group (the ranks holding the same experts), summed there and
//           divided by all the data-parallel ranks: each expert saw every
//           rank of its expert group's tokens, so the mean is over the same
//           samples as the dense one's (DeepSpeed divides both by the
//           data-parallel world too).
// Nothing of an expert is kept by a rank outside its expert-data group: its
// parameters, gradients and optimizer state are partitioned there alone.
//
// The owned space is the dense domain's followed by the experts'. They are
// two buffers, so owned_master/owned_grads/owned_params16 are null: the
// optimizer state (owned_state_factory.h) reaches each through its own
// tiles (split_owned_state.h), and the gradient norm through one share per
// domain.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/zero/zero_strategy.h"

namespace dscore::zero {

class ExpertSplitZero final : public ZeroStrategy {
 public:
  // `context`: the whole layout's, with ZeRO's group and the dense
  // reduction; `expert_group` (this rank's expert-data-parallel group) and
  // `expert_reduction` the experts'. INVALID_ARGUMENT when the layout has
  // no expert parameter.
  static Result<std::unique_ptr<ExpertSplitZero>> create(const ZeroContext& context,
                                                         comm::Communicator* expert_group,
                                                         const Reduction& expert_reduction);
  ~ExpertSplitZero() override;

  Status initialise(const Model& model) override;
  int64_t owned_numel() const override;
  const std::vector<OwnedSegment>& owned_segments() const override { return segments_; }
  float* owned_master() override { return nullptr; }
  void* owned_grads() override { return nullptr; }
  void* owned_params16() override { return nullptr; }
  GradientShare gradient_share() override;
  std::vector<GradientShare> gradient_shares() override;
  std::vector<ZeroStrategy*> domains() override { return {dense_, experts_}; }
  Status set_gradient_reduction(bool reduce) override;

  void begin_micro_step(bool boundary) override;
  Status acquire(size_t layer, dscore_acquire_mode mode, device::Stream* views_on,
                 dscore_layer_views* out) override;
  Status release(size_t layer) override;
  Status grads_ready(size_t layer) override;
  Status end_micro_step() override;

  Status after_update() override;
  void zero_grads(device::ops::Target target) override;
  Status gather_master(std::vector<float>* out) override;
  Status gather_owned(const float* owned, std::vector<float>* out) override;
  std::vector<ParamRun> checkpoint_params() override;
  std::vector<OwnedSegment> checkpoint_segments() const override;

 private:
  struct Domain {
    ParamLayout layout;
    std::vector<size_t> whole_index;  // each of its parameters' in the whole layout
    std::vector<size_t> whole_layer;  // each of its layers' in the whole layout
    // Per whole layer: its index here, or kNone (no parameter of the domain).
    std::vector<size_t> layer;
    ZeroContext context;
    std::unique_ptr<ZeroStrategy> strategy;
    std::unique_ptr<Model> model;  // the model as the strategy numbers it (initialise)
  };
  static constexpr size_t kNone = static_cast<size_t>(-1);
  ExpertSplitZero() = default;
  // The domains' values (each its own layout order) in the whole layout's.
  void join(const std::vector<float>& dense, const std::vector<float>& experts,
            std::vector<float>* out) const;
  // `segments` of domain `d` in the whole layout and owned space.
  std::vector<OwnedSegment> to_whole(size_t d, std::vector<OwnedSegment> segments) const;

  ZeroContext whole_;
  Domain domains_[2];  // dense, experts
  ZeroStrategy* dense_ = nullptr;
  ZeroStrategy* experts_ = nullptr;
  std::vector<std::pair<size_t, size_t>> place_;  // per whole parameter: domain, index there
  std::vector<OwnedSegment> segments_;
  // Per layer: the views of its parameters in the whole layout's order.
  std::vector<std::vector<const dscore_tensor*>> param_views_;
  std::vector<std::vector<dscore_tensor*>> grad_views_;
};

}  // namespace dscore::zero
