#include "core/engine/optimizer_runner.h"

#include <dscore/cpp/dtype.hpp>

#include <cstring>

#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"
#include "core/tensor/tensor_view.h"

namespace dscore {
namespace {

dscore_tensor flat_view(void* data, dscore_dtype dtype, const std::vector<int64_t>& shape,
                        const char* name) {
  return tensor::host_view(data, dtype, shape, shape[0], name);
}

char* at(void* base, dscore_dtype dtype, int64_t index) {
  return static_cast<char*>(base) + index * static_cast<int64_t>(sdk::dtype_size(dtype));
}

}  // namespace

Result<std::unique_ptr<OptimizerRunner>> OptimizerRunner::create(
    std::unique_ptr<plugin_host::OptimizerInstance> instance, zero::ZeroStrategy* strategy,
    const ParamLayout& layout, dscore_dtype model_dtype, dscore_dtype grad_dtype, int stage) {
  if ((instance->info().capabilities & DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS) != 0 && stage != 0)
    return invalid_argument(instance->info().display() +
                            " needs every parameter whole (per-tensor norms), but ZeRO stage " +
                            std::to_string(stage) +
                            " splits parameters across ranks; use \"zero_optimization\": "
                            "{\"stage\": 0} with this optimizer");
  std::unique_ptr<OptimizerRunner> runner(new OptimizerRunner());
  runner->instance_ = std::move(instance);
  runner->strategy_ = strategy;
  runner->model_dtype_ = model_dtype;
  runner->grad_dtype_ = grad_dtype;
  const int64_t owned = strategy->owned_numel();
  for (const auto& slot : runner->instance_->slots()) {
    const int64_t elements = owned * slot.elements_per_param;
    DSCORE_ASSIGN_OR_RETURN(
        CountedBuffer buffer,
        tensor::allocate_elements(elements, slot.dtype, MemoryUse::kOptimizerState,
                                  "optimizer " + slot.name, tensor::Fill::kUninitialised));
    if (slot.initial_value == 0.0) {
      std::memset(buffer.get(), 0, static_cast<size_t>(elements) * sdk::dtype_size(slot.dtype));
    } else {
      const std::vector<int64_t> shape = {elements};
      dscore_tensor view = flat_view(buffer.get(), slot.dtype, shape, nullptr);
      for (int64_t i = 0; i < elements; ++i)
        sdk::store_float(&view, i, static_cast<float>(slot.initial_value));
    }
    runner->states_.push_back(std::move(buffer));
  }
  std::vector<zero::OwnedSegment> decay, no_decay;
  for (const zero::OwnedSegment& s : strategy->owned_segments()) {
    const bool skip_decay = (layout.params()[s.param].flags & DSCORE_PARAM_NO_WEIGHT_DECAY) != 0;
    (skip_decay ? no_decay : decay).push_back(s);
  }
  runner->groups_.resize(2);
  runner->build_group(&runner->groups_[0], 1.0, decay);
  runner->build_group(&runner->groups_[1], 0.0, no_decay);
  return runner;
}

void OptimizerRunner::build_group(Group* g, double multiplier,
                                  const std::vector<zero::OwnedSegment>& segments) {
  g->weight_decay_multiplier = multiplier;
  g->segments = segments;
  const auto& slots = instance_->slots();
  const size_t n = segments.size();
  g->shapes.resize(n);
  g->state_shapes.resize(slots.size() * n);
  float* master = strategy_->owned_master();
  void* grads = strategy_->owned_grads();
  void* p16 = strategy_->owned_params16();
  for (size_t i = 0; i < n; ++i) {
    const zero::OwnedSegment& s = segments[i];
    g->shapes[i] = {s.numel};
    g->params.push_back(flat_view(master + s.offset, DSCORE_DTYPE_F32, g->shapes[i], nullptr));
    g->grads.push_back(
        flat_view(at(grads, grad_dtype_, s.offset), grad_dtype_, g->shapes[i], nullptr));
    if (p16 != nullptr)
      g->params16.push_back(
          flat_view(at(p16, model_dtype_, s.offset), model_dtype_, g->shapes[i], nullptr));
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    for (size_t i = 0; i < n; ++i) {
      const zero::OwnedSegment& s = segments[i];
      const int64_t epp = slots[k].elements_per_param;
      g->state_shapes[k * n + i] = {s.numel * epp};
      g->states.push_back(flat_view(at(states_[k].get(), slots[k].dtype, s.offset * epp),
                                    slots[k].dtype, g->state_shapes[k * n + i],
                                    slots[k].name.c_str()));
    }
  }
  for (auto& t : g->params) g->param_ptrs.push_back(&t);
  for (auto& t : g->grads) g->grad_ptrs.push_back(&t);
  for (auto& t : g->states) g->state_ptrs.push_back(&t);
  for (auto& t : g->params16) g->p16_ptrs.push_back(&t);
}

std::vector<zero::StateSlot> OptimizerRunner::slots() const {
  std::vector<zero::StateSlot> out;
  for (const auto& s : instance_->slots()) out.push_back({s.name, s.dtype, s.elements_per_param});
  return out;
}

Status OptimizerRunner::step(const dscore_schedule_point& point, int64_t step, double grad_scale) {
  dscore_optimizer_hparams hparams{};
  hparams.struct_size = sizeof hparams;
  hparams.lr = point.lr;
  hparams.override_mask = point.set_mask & (DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2);
  hparams.beta1 = point.beta1;
  hparams.beta2 = point.beta2;
  hparams.step = step;
  hparams.grad_scale = grad_scale;
  const bool has_16bit = model_dtype_ != DSCORE_DTYPE_F32;
  for (Group& g : groups_) {
    if (g.segments.empty()) continue;
    hparams.weight_decay_multiplier = g.weight_decay_multiplier;
    dscore_optimizer_step_args args{};
    args.struct_size = sizeof args;
    args.hparams = &hparams;
    args.tensor_count = g.segments.size();
    args.params = g.param_ptrs.data();
    args.grads = g.grad_ptrs.data();
    args.slot_count = states_.size();
    args.states = g.state_ptrs.empty() ? nullptr : g.state_ptrs.data();
    args.params_16bit = has_16bit && fuse_16bit_ ? g.p16_ptrs.data() : nullptr;
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
  if (has_16bit && !fuse_16bit_) write_16bit_copy();
  return Status::Ok();
}

void OptimizerRunner::write_16bit_copy() {
  float* master = strategy_->owned_master();
  void* p16 = strategy_->owned_params16();
  if (p16 == nullptr) return;
  for (const Group& g : groups_)
    for (const zero::OwnedSegment& s : g.segments)
      tensor::convert(master + s.offset, DSCORE_DTYPE_F32, at(p16, model_dtype_, s.offset),
                      model_dtype_, s.numel);
}

}  // namespace dscore
