#include "core/engine/optimizer_runner.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>

#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"
#include "core/tensor/tensor_view.h"

namespace dscore {
namespace {

dscore_tensor flat_view(void* data, dscore_dtype dtype, const std::vector<int64_t>& shape,
                        const char* name, const StepTarget& target) {
  dscore_tensor t = tensor::host_view(data, dtype, shape, shape[0], name);
  t.device_type = target.device_type;
  t.device_id = target.device_id;
  return t;
}

char* at(void* base, dscore_dtype dtype, int64_t index) {
  return static_cast<char*>(base) + index * static_cast<int64_t>(sdk::dtype_size(dtype));
}

}  // namespace

Result<std::unique_ptr<OptimizerRunner>> OptimizerRunner::create(
    std::unique_ptr<plugin_host::OptimizerInstance> instance, zero::ZeroStrategy* strategy,
    std::unique_ptr<OwnedState> state, const ParamLayout& layout, dscore_dtype model_dtype,
    dscore_dtype grad_dtype, int stage) {
  if ((instance->info().capabilities & DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS) != 0 && stage != 0)
    return invalid_argument(instance->info().display() +
                            " needs every parameter whole (per-tensor norms), but ZeRO stage " +
                            std::to_string(stage) +
                            " splits parameters across ranks; use \"zero_optimization\": "
                            "{\"stage\": 0} with this optimizer");
  std::unique_ptr<OptimizerRunner> runner(new OptimizerRunner());
  runner->instance_ = std::move(instance);
  runner->strategy_ = strategy;
  runner->state_ = std::move(state);
  runner->model_dtype_ = model_dtype;
  runner->grad_dtype_ = grad_dtype;
  std::vector<bool> whole(layout.params().size(), false);
  if (runner->instance_->has_precondition()) {
    for (size_t i = 0; i < layout.params().size(); ++i) {
      DSCORE_ASSIGN_OR_RETURN(const bool takes,
                              runner->instance_->preconditions(layout.params()[i].descriptor()));
      whole[i] = takes;
      if (takes) runner->preconditioned_.push_back(i);
    }
  }
  // Groups in a fixed order: decayed before not, plain before preconditioned.
  SegmentGroup groups[4];
  for (const zero::OwnedSegment& s : strategy->owned_segments()) {
    const bool skip_decay = (layout.params()[s.param].flags & DSCORE_PARAM_NO_WEIGHT_DECAY) != 0;
    groups[(skip_decay ? 1 : 0) + (whole[s.param] ? 2 : 0)].segments.push_back(s);
  }
  for (int k = 0; k < 4; ++k) {
    if (groups[k].segments.empty()) continue;
    groups[k].weight_decay_multiplier = (k & 1) != 0 ? 0.0 : 1.0;
    groups[k].flags = (k & 2) != 0 ? DSCORE_OPTIMIZER_GROUP_PRECONDITIONED : 0u;
    runner->groups_.push_back(std::move(groups[k]));
  }
  return runner;
}

void OptimizerRunner::build_group(Group* g, const SegmentGroup& segments, const StateTile& tile,
                                  bool on_host) {
  *g = Group{};
  g->weight_decay_multiplier = segments.weight_decay_multiplier;
  for (const zero::OwnedSegment& s : segments.segments) {
    const int64_t a = std::max(s.offset, tile.begin);
    const int64_t b = std::min(s.offset + s.numel, tile.end);
    if (a < b) g->segments.push_back({s.param, a, b - a, s.element + (a - s.offset)});
  }
  const auto& slots = instance_->slots();
  const size_t n = g->segments.size();
  g->shapes.resize(n);
  g->state_shapes.resize(slots.size() * n);
  // Staged gradients start at the tile's first element; the strategy's at 0.
  void* grads = tile.grads != nullptr ? tile.grads : strategy_->owned_grads();
  const int64_t grads_first = tile.grads != nullptr ? tile.begin : 0;
  // The 16-bit copy goes to the tile's staging where the state offers it
  // (kStep); otherwise to the strategy's, unless a state on the host writes
  // the model's parameters itself.
  void* p16 = tile.params16;
  const int64_t p16_first = tile.params16 != nullptr ? tile.begin : 0;
  if (p16 == nullptr && !on_host) p16 = strategy_->owned_params16();
  for (size_t i = 0; i < n; ++i) {
    const zero::OwnedSegment& s = g->segments[i];
    g->shapes[i] = {s.numel};
    g->params.push_back(flat_view(tile.master + (s.offset - tile.begin), DSCORE_DTYPE_F32,
                                  g->shapes[i], nullptr, target_));
    g->grads.push_back(flat_view(at(grads, grad_dtype_, s.offset - grads_first), grad_dtype_,
                                 g->shapes[i], nullptr, target_));
    if (p16 != nullptr)
      g->params16.push_back(flat_view(at(p16, model_dtype_, s.offset - p16_first), model_dtype_,
                                      g->shapes[i], nullptr, target_));
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    for (size_t i = 0; i < n; ++i) {
      const zero::OwnedSegment& s = g->segments[i];
      const int64_t epp = slots[k].elements_per_param;
      g->state_shapes[k * n + i] = {s.numel * epp};
      g->states.push_back(
          flat_view(at(tile.slots[k], slots[k].dtype, (s.offset - tile.begin) * epp),
                    slots[k].dtype, g->state_shapes[k * n + i], slots[k].name.c_str(), target_));
    }
  }
  for (auto& t : g->params) g->param_ptrs.push_back(&t);
  for (auto& t : g->grads) g->grad_ptrs.push_back(&t);
  for (auto& t : g->states) g->state_ptrs.push_back(&t);
  for (auto& t : g->params16) g->p16_ptrs.push_back(&t);
}

dscore_optimizer_hparams OptimizerRunner::hparams_at(const dscore_schedule_point& point,
                                                     int64_t step, double grad_scale) {
  dscore_optimizer_hparams hparams{};
  hparams.struct_size = sizeof hparams;
  hparams.lr = point.lr;
  hparams.override_mask = point.set_mask & (DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2);
  hparams.beta1 = point.beta1;
  hparams.beta2 = point.beta2;
  hparams.weight_decay_multiplier = 1;
  hparams.step = step;
  hparams.grad_scale = grad_scale;
  return hparams;
}

std::vector<zero::StateSlot> OptimizerRunner::slots() const {
  std::vector<zero::StateSlot> out;
  for (const auto& s : instance_->slots()) out.push_back({s.name, s.dtype, s.elements_per_param});
  return out;
}

Status OptimizerRunner::step(OwnedState& part, const dscore_schedule_point& point, int64_t step,
                             double grad_scale, const StepTarget& target) {
  // Every view and conversion of this step names `target`; the host again after.
  struct Restore {
    StepTarget* target;
    ~Restore() { *target = StepTarget{}; }
  } restore{&target_};
  target_ = target;
  dscore_optimizer_hparams hparams = hparams_at(point, step, grad_scale);
  // A state on the host writes the model's parameters in its walk.
  const bool on_host = part.on_host();
  const bool elsewhere = strategy_->params16_elsewhere() && !on_host;
  DSCORE_RETURN_IF_ERROR(
      part.for_each_tile(TileAccess::kStep, [&](const StateTile& tile) -> Status {
        DSCORE_RETURN_IF_ERROR(step_tile(tile, on_host, &hparams));
        if (tile.params16 != nullptr) {
          finish_staged_16bit(tile);
          return Status::Ok();
        }
        return elsewhere ? write_16bit_tile(tile) : Status::Ok();
      }));
  if (model_dtype_ != DSCORE_DTYPE_F32 && !fuse_16bit_ && !elsewhere && !on_host)
    return write_16bit_part(part);
  return Status::Ok();
}

Status OptimizerRunner::step_tile(const StateTile& tile, bool on_host,
                                  dscore_optimizer_hparams* hparams) {
  const bool has_16bit = model_dtype_ != DSCORE_DTYPE_F32;
  Group g;
  for (const SegmentGroup& group : groups_) {
    build_group(&g, group, tile, on_host);
    if (g.segments.empty()) continue;
    hparams->weight_decay_multiplier = g.weight_decay_multiplier;
    hparams->group_flags = group.flags;
    dscore_optimizer_step_args args{};
    args.struct_size = sizeof args;
    args.hparams = hparams;
    args.tensor_count = g.segments.size();
    args.params = g.param_ptrs.data();
    args.grads = g.grad_ptrs.data();
    args.slot_count = tile.slots.size();
    args.states = g.state_ptrs.empty() ? nullptr : g.state_ptrs.data();
    args.params_16bit =
        has_16bit && fuse_16bit_ && !g.p16_ptrs.empty() ? g.p16_ptrs.data() : nullptr;
    args.stream = target_.ops.stream;
    Status status = instance_->step(args);
    if (status.code() == DSCORE_UNIMPLEMENTED && args.params_16bit != nullptr) {
      // The plugin does not write the 16-bit copy; it must not have touched
      // anything (optimizer.h), so retry without and convert afterwards.
      fuse_16bit_ = false;
      args.params_16bit = nullptr;
      status = instance_->step(args);
    }
    DSCORE_RETURN_IF_ERROR(status);
  }
  return Status::Ok();
}

void OptimizerRunner::finish_staged_16bit(const StateTile& tile) {
  // What the step wrote: the tile's part of every segment, when fused.
  std::vector<std::pair<int64_t, int64_t>> written;
  if (fuse_16bit_)
    for (const SegmentGroup& group : groups_)
      for (const zero::OwnedSegment& s : group.segments) {
        const int64_t a = std::max(s.offset, tile.begin);
        const int64_t b = std::min(s.offset + s.numel, tile.end);
        if (a < b) written.emplace_back(a, b);
      }
  std::sort(written.begin(), written.end());
  int64_t done = tile.begin;  // [tile.begin, done) is written
  auto convert_to = [&](int64_t end) {
    if (done < end)
      tensor::convert(tile.master + (done - tile.begin), DSCORE_DTYPE_F32,
                      at(tile.params16, model_dtype_, done - tile.begin), model_dtype_, end - done);
  };
  for (const auto& [begin, end] : written) {
    convert_to(begin);
    done = std::max(done, end);
  }
  convert_to(tile.end);
}

Status OptimizerRunner::write_16bit_copy() {
  // A state on the host wrote the model's copy in its last kUpdate walk.
  if (model_dtype_ == DSCORE_DTYPE_F32) return Status::Ok();
  for (OwnedState* part : state_->parts())
    if (!part->on_host()) DSCORE_RETURN_IF_ERROR(write_16bit_part(*part));
  return Status::Ok();
}

Status OptimizerRunner::write_16bit_part(OwnedState& part) {
  return part.for_each_tile(TileAccess::kRead,
                            [&](const StateTile& tile) { return write_16bit_tile(tile); });
}

Status OptimizerRunner::write_16bit_tile(const StateTile& tile) {
  if (model_dtype_ == DSCORE_DTYPE_F32) return Status::Ok();
  // The tile's own 16-bit parameters (element tile.begin), else the strategy's (element 0).
  void* p16 = tile.params16 != nullptr ? tile.params16 : strategy_->owned_params16();
  const int64_t p16_first = tile.params16 != nullptr ? tile.begin : 0;
  if (p16 != nullptr) {
    for (const SegmentGroup& group : groups_)
      for (const zero::OwnedSegment& s : group.segments) {
        const int64_t a = std::max(s.offset, tile.begin);
        const int64_t b = std::min(s.offset + s.numel, tile.end);
        if (a < b)
          device::ops::convert(target_.ops, tile.master + (a - tile.begin), DSCORE_DTYPE_F32,
                               at(p16, model_dtype_, a - p16_first), model_dtype_, b - a);
      }
    return Status::Ok();
  }
  // The 16-bit parameters are elsewhere (stage 3 on NVMe): the whole tile,
  // padding included, in pieces that start on a granule.
  constexpr int64_t kPiece = int64_t{1} << 22;  // a multiple of zero::kTileGranularity
  std::vector<char> staging(static_cast<size_t>(std::min(kPiece, tile.end - tile.begin)) *
                            sdk::dtype_size(model_dtype_));
  for (int64_t a = tile.begin; a < tile.end; a += kPiece) {
    const int64_t b = std::min(a + kPiece, tile.end);
    tensor::convert(tile.master + (a - tile.begin), DSCORE_DTYPE_F32, staging.data(), model_dtype_,
                    b - a);
    DSCORE_RETURN_IF_ERROR(strategy_->store_params16(a, b - a, staging.data()));
  }
  return Status::Ok();
}

}  // namespace dscore
