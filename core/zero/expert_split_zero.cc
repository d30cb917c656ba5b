#include "core/zero/expert_split_zero.h"

#include <algorithm>

namespace dscore::zero {
namespace {

// The model as a domain's strategy sees it: its parameter k is the whole
// model's whole_index[k] (only init_param is reached from a strategy).
class DomainModel final : public Model {
 public:
  DomainModel(const Model& whole, const std::vector<size_t>& whole_index)
      : whole_(whole), whole_index_(whole_index) {}
  std::string display_name() const override { return whole_.display_name(); }
  const dscore_model_description& description() const override { return whole_.description(); }
  Status init_param(size_t param_index, int64_t offset, int64_t count, float* out) const override {
    return whole_.init_param(whole_index_.at(param_index), offset, count, out);
  }
  Status forward_backward(const dscore_batch&, const dscore_model_hooks&, double,
                          double*) override {
    return internal_error("a ZeRO domain's view of the model does not train");
  }

 private:
  const Model& whole_;
  const std::vector<size_t>& whole_index_;
};

constexpr size_t kDense = 0, kExperts = 1;

}  // namespace

Result<std::unique_ptr<ExpertSplitZero>> ExpertSplitZero::create(
    const ZeroContext& context, comm::Communicator* expert_group,
    const Reduction& expert_reduction) {
  const ParamLayout& whole = *context.layout;
  std::vector<bool> expert(whole.params().size());
  for (size_t i = 0; i < expert.size(); ++i)
    expert[i] = (whole.params()[i].flags & DSCORE_PARAM_EXPERT) != 0;
  if (std::find(expert.begin(), expert.end(), true) == expert.end())
    return invalid_argument(
        "expert parallelism needs a model with MoE layers, whose experts' parameters it "
        "declares with DSCORE_PARAM_EXPERT; this one declares none (set the gpt's "
        "moe_num_experts, or expert_parallel.enabled false)");
  if (!context.norm_excluded.empty() || context.norm_skipped != 0 ||
      context.param_swapper != nullptr || context.reduced_gradients != nullptr)
    return internal_error("expert parallelism with tensor parallelism, a pipeline or offload");
  std::unique_ptr<ExpertSplitZero> zero(new ExpertSplitZero());
  zero->whole_ = context;
  std::vector<bool> dense(expert.size());
  for (size_t i = 0; i < expert.size(); ++i) dense[i] = !expert[i];
  for (size_t d : {kDense, kExperts}) {
    Domain& domain = zero->domains_[d];
    domain.layout = ParamLayout::subset(whole, d == kDense ? dense : expert, &domain.whole_index,
                                        &domain.whole_layer);
    domain.layer.assign(whole.layer_count(), kNone);
    for (size_t j = 0; j < domain.whole_layer.size(); ++j) domain.layer[domain.whole_layer[j]] = j;
    domain.context = context;
    domain.context.layout = &domain.layout;
    if (d == kExperts) {
      domain.context.comm = expert_group;
      domain.context.reduction = expert_reduction;
    }
    domain.strategy = make_zero_strategy(domain.context);
  }
  zero->dense_ = zero->domains_[kDense].strategy.get();
  zero->experts_ = zero->domains_[kExperts].strategy.get();
  zero->place_.resize(expert.size());
  for (size_t d : {kDense, kExperts})
    for (size_t k = 0; k < zero->domains_[d].whole_index.size(); ++k)
      zero->place_[zero->domains_[d].whole_index[k]] = {d, k};
  zero->param_views_.resize(whole.layer_count());
  zero->grad_views_.resize(whole.layer_count());
  for (size_t l = 0; l < whole.layer_count(); ++l) {
    zero->param_views_[l].resize(whole.layer_end(l) - whole.layer_first(l));
    zero->grad_views_[l].resize(whole.layer_end(l) - whole.layer_first(l));
  }
  return zero;
}

ExpertSplitZero::~ExpertSplitZero() = default;

Status ExpertSplitZero::initialise(const Model& model) {
  // The dense domain first on every rank: its collectives span the group
  // every rank is in.
  for (Domain& domain : domains_) {
    domain.model = std::make_unique<DomainModel>(model, domain.whole_index);
    DSCORE_RETURN_IF_ERROR(domain.strategy->initialise(*domain.model));
  }
  segments_ = to_whole(kDense, dense_->owned_segments());
  for (const OwnedSegment& s : to_whole(kExperts, experts_->owned_segments()))
    segments_.push_back(s);
  return Status::Ok();
}

std::vector<OwnedSegment> ExpertSplitZero::to_whole(size_t d,
                                                    std::vector<OwnedSegment> segments) const {
  const int64_t shift = d == kDense ? 0 : dense_->owned_numel();
  for (OwnedSegment& s : segments) {
    s.param = domains_[d].whole_index[s.param];
    s.offset += shift;
  }
  return segments;
}

int64_t ExpertSplitZero::owned_numel() const {
  return dense_->owned_numel() + experts_->owned_numel();
}

GradientShare ExpertSplitZero::gradient_share() {
  DSCORE_CHECK(false, "ExpertSplitZero has one gradient share per domain: gradient_shares()");
  return {};
}

std::vector<GradientShare> ExpertSplitZero::gradient_shares() {
  return {dense_->gradient_share(), experts_->gradient_share()};
}

Status ExpertSplitZero::set_gradient_reduction(bool reduce) {
  // An optimizer that communicates the gradients itself would average the
  // experts' over every data-parallel rank, across experts.
  if (!reduce)
    return failed_precondition(
        "the optimizer communicates gradients itself (OneBitAdam's compressed phase) over all "
        "the data-parallel ranks, but under expert parallelism each expert's gradients belong to "
        "its expert-data-parallel ranks alone: use another optimizer, or set "
        "expert_parallel.enabled false");
  DSCORE_RETURN_IF_ERROR(dense_->set_gradient_reduction(reduce));
  return experts_->set_gradient_reduction(reduce);
}

void ExpertSplitZero::begin_micro_step(bool boundary) {
  dense_->begin_micro_step(boundary);
  experts_->begin_micro_step(boundary);
}

Status ExpertSplitZero::acquire(size_t layer, dscore_acquire_mode mode, device::Stream* views_on,
                                dscore_layer_views* out) {
  // Each domain with parameters in the layer lends its views; they go
  // back in the whole layer's order.
  dscore_layer_views views[2] = {*out, *out};
  for (size_t d : {kDense, kExperts}) {
    const size_t here = domains_[d].layer[layer];
    if (here == kNone) continue;
    Status acquired = domains_[d].strategy->acquire(here, mode, views_on, &views[d]);
    if (!acquired.ok()) {
      if (d == kExperts && domains_[kDense].layer[layer] != kNone)
        (void)dense_->release(domains_[kDense].layer[layer]);
      return acquired;
    }
  }
  const ParamLayout& whole = *whole_.layout;
  const size_t first = whole.layer_first(layer);
  std::vector<const dscore_tensor*>& params = param_views_[layer];
  std::vector<dscore_tensor*>& grads = grad_views_[layer];
  for (size_t i = first; i < whole.layer_end(layer); ++i) {
    const auto [d, k] = place_[i];
    const size_t at = k - domains_[d].layout.layer_first(domains_[d].layer[layer]);
    params[i - first] = views[d].params[at];
    grads[i - first] = views[d].grads != nullptr ? views[d].grads[at] : nullptr;
  }
  out->count = params.size();
  out->params = params.data();
  out->grads = mode == DSCORE_ACQUIRE_BACKWARD ? grads.data() : nullptr;
  return Status::Ok();
}

Status ExpertSplitZero::release(size_t layer) {
  Status status = Status::Ok();
  for (const Domain& domain : domains_)
    if (const size_t here = domain.layer[layer]; here != kNone) {
      Status released = domain.strategy->release(here);
      if (status.ok()) status = released;
    }
  return status;
}

Status ExpertSplitZero::grads_ready(size_t layer) {
  for (const Domain& domain : domains_)
    if (const size_t here = domain.layer[layer]; here != kNone)
      DSCORE_RETURN_IF_ERROR(domain.strategy->grads_ready(here));
  return Status::Ok();
}

Status ExpertSplitZero::end_micro_step() {
  // Both, also after a failure: each waits for what it queued.
  Status dense = dense_->end_micro_step();
  Status experts = experts_->end_micro_step();
  return dense.ok() ? experts : dense;
}

Status ExpertSplitZero::after_update() {
  DSCORE_RETURN_IF_ERROR(dense_->after_update());
  return experts_->after_update();
}

void ExpertSplitZero::zero_grads(device::ops::Target target) {
  dense_->zero_grads(target);
  experts_->zero_grads(target);
}

void ExpertSplitZero::join(const std::vector<float>& dense, const std::vector<float>& experts,
                           std::vector<float>* out) const {
  const ParamLayout& whole = *whole_.layout;
  out->assign(static_cast<size_t>(whole.total_numel()), 0.0f);
  const std::vector<float>* values[2] = {&dense, &experts};
  for (size_t i = 0; i < whole.params().size(); ++i) {
    const auto [d, k] = place_[i];
    const ParamEntry& p = whole.params()[i];
    std::copy_n(values[d]->data() + domains_[d].layout.params()[k].offset, p.numel,
                out->data() + p.offset);
  }
}

Status ExpertSplitZero::gather_master(std::vector<float>* out) {
  std::vector<float> dense, experts;
  DSCORE_RETURN_IF_ERROR(dense_->gather_master(&dense));
  DSCORE_RETURN_IF_ERROR(experts_->gather_master(&experts));
  join(dense, experts, out);
  return Status::Ok();
}

Status ExpertSplitZero::gather_owned(const float* owned, std::vector<float>* out) {
  std::vector<float> dense, experts;
  DSCORE_RETURN_IF_ERROR(dense_->gather_owned(owned, &dense));
  DSCORE_RETURN_IF_ERROR(experts_->gather_owned(owned + dense_->owned_numel(), &experts));
  join(dense, experts, out);
  return Status::Ok();
}

std::vector<ParamRun> ExpertSplitZero::checkpoint_params() {
  std::vector<ParamRun> runs;
  for (size_t d : {kDense, kExperts})
    for (ParamRun& r : domains_[d].strategy->checkpoint_params()) {
      r.param = domains_[d].whole_index[r.param];
      runs.push_back(std::move(r));
    }
  return runs;
}

std::vector<OwnedSegment> ExpertSplitZero::checkpoint_segments() const {
  std::vector<OwnedSegment> out = to_whole(kDense, dense_->checkpoint_segments());
  for (const OwnedSegment& s : to_whole(kExperts, experts_->checkpoint_segments()))
    out.push_back(s);
  return out;
}

}  // namespace dscore::zero
