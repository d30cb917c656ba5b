#include "core/engine/engine.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/base/logging.h"
#include "core/base/strings.h"

namespace dscore {

std::vector<config::ConfigError> unsupported_features(const config::TrainingConfig& config) {
  std::vector<config::ConfigError> out;
  if (config.zero.stage != 0)
    out.push_back({"zero_optimization.stage", {},
                   "stage " + std::to_string(config.zero.stage) +
                       " is not available in this dscore build yet (the single-rank engine runs "
                       "stage 0); set \"stage\": 0"});
  if (config.fp16.enabled)
    out.push_back({"fp16.enabled", {},
                   "fp16 is not available in this dscore build yet (the single-rank engine "
                   "trains in fp32); set \"enabled\": false"});
  if (config.bf16.enabled)
    out.push_back({"bf16.enabled", {},
                   "bf16 is not available in this dscore build yet (the single-rank engine "
                   "trains in fp32); set \"enabled\": false"});
  if (config.zero.offload_optimizer && config.zero.offload_optimizer->device != "none")
    out.push_back({"zero_optimization.offload_optimizer.device", {},
                   "optimizer offload is not available in this dscore build yet; set \"device\": \"none\""});
  if (config.zero.offload_param && config.zero.offload_param->device != "none")
    out.push_back({"zero_optimization.offload_param.device", {},
                   "parameter offload is not available in this dscore build yet; set \"device\": \"none\""});
  return out;
}

namespace {

dscore_tensor flat_view(void* data, dscore_dtype dtype, const std::vector<int64_t>& shape,
                        int64_t numel, const char* name) {
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

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const config::TrainingConfig& config,
                                               EngineComponents components) {
  if (auto unsupported = unsupported_features(config); !unsupported.empty())
    return unimplemented(unsupported.front().path + ": " + unsupported.front().message);
  if (!components.model) return invalid_argument("the engine needs a model");
  if (!components.optimizer)
    return invalid_argument("the engine needs an optimizer: add an \"optimizer\" section");
  std::unique_ptr<Engine> engine(new Engine(config));
  engine->model_ = std::move(components.model);
  engine->optimizer_ = std::move(components.optimizer);
  engine->schedule_ = std::make_unique<LrSchedule>(std::move(components.scheduler), components.base_lr);
  engine->monitors_ = MonitorHub(std::move(components.monitors));
  DSCORE_ASSIGN_OR_RETURN(engine->layout_,
                          ParamLayout::from_description(engine->model_->description()));
  DSCORE_RETURN_IF_ERROR(engine->allocate_and_initialise());
  engine->build_views();
  return engine;
}

Engine::~Engine() { monitors_.flush(); }

Status Engine::allocate_and_initialise() {
  const size_t n = static_cast<size_t>(layout_.total_numel());
  params_ = make_counted_buffer(n * sizeof(float), DSCORE_MEMORY_HOST, "parameters fp32");
  grads_ = make_counted_buffer(n * sizeof(float), DSCORE_MEMORY_HOST, "gradients fp32");
  if (!params_ || !grads_)
    return Status(DSCORE_RESOURCE_EXHAUSTED,
                  "cannot allocate " + format_bytes(2 * n * sizeof(float)) +
                      " for parameters and gradients");
  std::memset(grads_.get(), 0, n * sizeof(float));
  float* params = static_cast<float*>(params_.get());
  for (const ParamEntry& p : layout_.params()) {
    size_t index = static_cast<size_t>(&p - layout_.params().data());
    DSCORE_RETURN_IF_ERROR(model_->init_param(index, 0, p.numel, params + p.offset));
  }
  for (const auto& slot : optimizer_->slots()) {
    const size_t elements = n * slot.elements_per_param;
    const size_t bytes = elements * sdk::dtype_size(slot.dtype);
    CountedBuffer buffer = make_counted_buffer(bytes, DSCORE_MEMORY_HOST, "optimizer " + slot.name);
    if (!buffer)
      return Status(DSCORE_RESOURCE_EXHAUSTED, "cannot allocate " + format_bytes(bytes) +
                                                   " for optimizer state '" + slot.name + "'");
    // Fill with the declared initial value, converted to the slot's dtype.
    dscore_tensor view = flat_view(buffer.get(), slot.dtype, {}, static_cast<int64_t>(elements), nullptr);
    if (slot.initial_value == 0.0) {
      std::memset(buffer.get(), 0, bytes);
    } else {
      for (size_t i = 0; i < elements; ++i)
        sdk::store_float(&view, static_cast<int64_t>(i), static_cast<float>(slot.initial_value));
    }
    states_.push_back(std::move(buffer));
  }
  return Status::Ok();
}

void Engine::build_views() {
  const auto& params = layout_.params();
  const size_t n = params.size();
  float* p = static_cast<float*>(params_.get());
  float* g = static_cast<float*>(grads_.get());
  param_views_.reserve(n);
  grad_views_.reserve(n);
  for (const ParamEntry& e : params) {
    param_views_.push_back(flat_view(p + e.offset, DSCORE_DTYPE_F32, e.shape, e.numel, e.name.c_str()));
    grad_views_.push_back(flat_view(g + e.offset, DSCORE_DTYPE_F32, e.shape, e.numel, e.name.c_str()));
  }
  for (size_t i = 0; i < n; ++i) {
    param_view_ptrs_.push_back(&param_views_[i]);
    grad_view_ptrs_.push_back(&grad_views_[i]);
  }
  // State views: a state tensor of param i is 1-D with numel * elements_per_param.
  const auto& slots = optimizer_->slots();
  state_shapes_.resize(slots.size() * n);
  state_views_.resize(slots.size());
  for (size_t s = 0; s < slots.size(); ++s) {
    const size_t elem_size = sdk::dtype_size(slots[s].dtype);
    char* base = static_cast<char*>(states_[s].get());
    for (size_t i = 0; i < n; ++i) {
      const int64_t numel = params[i].numel * slots[s].elements_per_param;
      state_shapes_[s * n + i] = {numel};
      const int64_t offset = params[i].offset * slots[s].elements_per_param;
      state_views_[s].push_back(flat_view(base + offset * static_cast<int64_t>(elem_size),
                                          slots[s].dtype, state_shapes_[s * n + i], numel,
                                          params[i].name.c_str()));
    }
  }
  acquired_.assign(layout_.layer_count(), 0);
}

// ---------------------------------------------------------------- hooks

dscore_status Engine::fail_hook(dscore_status code, const std::string& message) {
  if (hook_error_.empty()) hook_error_ = message;
  return code;
}

dscore_status Engine::hook_acquire(void* ctx, size_t layer, dscore_acquire_mode mode,
                                   dscore_layer_views* out) {
  Engine* self = static_cast<Engine*>(ctx);
  if (layer >= self->layout_.layer_count())
    return self->fail_hook(DSCORE_INVALID_ARGUMENT,
                           "acquire(" + std::to_string(layer) + "): the model has only " +
                               std::to_string(self->layout_.layer_count()) + " layers");
  if (out == nullptr || out->struct_size < offsetof(dscore_layer_views, grads) + sizeof(void*))
    return self->fail_hook(DSCORE_INVALID_ARGUMENT,
                           "acquire: views struct missing or struct_size too small");
  const size_t first = self->layout_.layer_first(layer);
  self->acquired_[layer] += 1;
  out->count = self->layout_.layer_end(layer) - first;
  out->params = self->param_view_ptrs_.data() + first;
  out->grads = mode == DSCORE_ACQUIRE_BACKWARD ? self->grad_view_ptrs_.data() + first : nullptr;
  return DSCORE_OK;
}

dscore_status Engine::hook_release(void* ctx, size_t layer) {
  Engine* self = static_cast<Engine*>(ctx);
  if (layer >= self->layout_.layer_count() || self->acquired_[layer] == 0)
    return self->fail_hook(DSCORE_FAILED_PRECONDITION,
                           "release(" + std::to_string(layer) + ") without a matching acquire");
  self->acquired_[layer] -= 1;
  return DSCORE_OK;
}

dscore_status Engine::hook_grads_ready(void* ctx, size_t layer) {
  Engine* self = static_cast<Engine*>(ctx);
  if (layer >= self->layout_.layer_count() || self->acquired_[layer] == 0)
    return self->fail_hook(DSCORE_FAILED_PRECONDITION,
                           "grads_ready(" + std::to_string(layer) + ") on a layer not acquired");
  // Stage 0 on one rank: nothing to reduce. Multi-rank stages start their
  // bucketed reduction here.
  return DSCORE_OK;
}

// -------------------------------------------------------------- training

Result<double> Engine::forward_backward(const dscore_batch& batch) {
  dscore_model_hooks hooks{};
  hooks.struct_size = sizeof hooks;
  hooks.ctx = this;
  hooks.acquire = &Engine::hook_acquire;
  hooks.release = &Engine::hook_release;
  hooks.grads_ready = &Engine::hook_grads_ready;
  hook_error_.clear();
  const int64_t gas = config_.batch.gradient_accumulation_steps;
  double loss = 0;
  Status status = model_->forward_backward(batch, hooks, 1.0 / static_cast<double>(gas), &loss);
  if (!hook_error_.empty())
    return Status(DSCORE_INVALID_ARGUMENT,
                  model_->display_name() + " misused the engine's hooks: " + hook_error_);
  if (!status.ok()) return status;
  for (size_t l = 0; l < acquired_.size(); ++l) {
    if (acquired_[l] != 0) {
      acquired_.assign(acquired_.size(), 0);
      return Status(DSCORE_INVALID_ARGUMENT, model_->display_name() + " returned with layer " +
                                                 std::to_string(l) + " still acquired; every "
                                                 "acquire needs a release");
    }
  }
  loss_accumulator_ += loss / static_cast<double>(gas);
  return loss;
}

bool Engine::is_gradient_accumulation_boundary() const {
  return (micro_steps_ + 1) % config_.batch.gradient_accumulation_steps == 0;
}

double Engine::compute_grad_norm() const {
  const float* g = static_cast<const float*>(grads_.get());
  double sum = 0;
  for (int64_t i = 0; i < layout_.total_numel(); ++i) sum += static_cast<double>(g[i]) * g[i];
  return std::sqrt(sum);
}

Status Engine::step() {
  const bool boundary = is_gradient_accumulation_boundary();
  micro_steps_ += 1;
  if (!boundary) return Status::Ok();

  const double grad_norm = compute_grad_norm();
  last_grad_norm_ = grad_norm;
  const int64_t samples_before = global_samples_;
  const double loss = loss_accumulator_;
  loss_accumulator_ = 0;
  last_loss_ = loss;

  // A non-finite gradient would destroy the weights: skip the update (and
  // the schedule) on it in every precision. DeepSpeed applies it under
  // fp32/bf16; see docs/deepspeed-differences.md.
  last_step_applied_ = std::isfinite(grad_norm);
  if (last_step_applied_) {
    DSCORE_RETURN_IF_ERROR(apply_update(grad_norm));
    schedule_->advance();
  } else {
    skipped_steps_ += 1;
    log_warning("step " + std::to_string(global_steps_ + 1) +
                ": gradient norm is not finite; the update is skipped");
  }
  std::memset(grads_.get(), 0, static_cast<size_t>(layout_.total_numel()) * sizeof(float));
  global_steps_ += 1;
  global_samples_ += config_.batch.train_batch_size;
  monitors_.write(boundary_events(loss, samples_before));
  return Status::Ok();
}

Status Engine::apply_update(double grad_norm) {
  DSCORE_ASSIGN_OR_RETURN(dscore_schedule_point point, schedule_->current());
  // Clipping (REFERENCE.md 4.6): combined = S * max(1, (N/S + 1e-6) / c)
  // folds loss-scale removal (S = 1 in fp32) and clipping into one factor.
  const double loss_scale = 1.0;
  double combined = loss_scale;
  if (config_.gradient_clipping > 0)
    combined = loss_scale * std::max(1.0, (grad_norm / loss_scale + 1e-6) / config_.gradient_clipping);

  dscore_optimizer_hparams hparams{};
  hparams.struct_size = sizeof hparams;
  hparams.lr = point.lr;
  hparams.override_mask = point.set_mask & (DSCORE_HPARAM_BETA1 | DSCORE_HPARAM_BETA2);
  hparams.beta1 = point.beta1;
  hparams.beta2 = point.beta2;
  hparams.step = applied_steps_ + 1;
  hparams.grad_scale = 1.0 / combined;

  // Two calls: parameters with weight decay, then those the model marks
  // DSCORE_PARAM_NO_WEIGHT_DECAY (multiplier 0). Same group for the schedule.
  const auto& params = layout_.params();
  const size_t slot_count = optimizer_->slots().size();
  for (int decay = 1; decay >= 0; --decay) {
    std::vector<dscore_tensor*> p, states;
    std::vector<const dscore_tensor*> g;
    std::vector<size_t> members;
    for (size_t i = 0; i < params.size(); ++i) {
      const bool no_decay = (params[i].flags & DSCORE_PARAM_NO_WEIGHT_DECAY) != 0;
      if (no_decay != (decay == 0)) continue;
      members.push_back(i);
      p.push_back(&param_views_[i]);
      g.push_back(&grad_views_[i]);
    }
    if (members.empty()) continue;
    for (size_t s = 0; s < slot_count; ++s)
      for (size_t i : members) states.push_back(&state_views_[s][i]);
    hparams.weight_decay_multiplier = decay;
    dscore_optimizer_step_args args{};
    args.struct_size = sizeof args;
    args.hparams = &hparams;
    args.tensor_count = members.size();
    args.params = p.data();
    args.grads = g.data();
    args.slot_count = slot_count;
    args.states = states.empty() ? nullptr : states.data();
    DSCORE_RETURN_IF_ERROR(optimizer_->step(args));
  }
  applied_steps_ += 1;
  return Status::Ok();
}

std::vector<ScalarEvent> Engine::boundary_events(double loss, int64_t samples_before) const {
  // DeepSpeed: train_loss at the pre-increment global_samples, lr after the
  // scheduler step at the post-increment value (REFERENCE.md section 7).
  std::vector<ScalarEvent> events;
  events.push_back({"Train/Samples/train_loss", loss, samples_before});
  const std::vector<double> lr = get_lr();
  events.push_back({"Train/Samples/lr", lr.empty() ? 0.0 : lr[0], global_samples_});
  return events;
}

std::vector<double> Engine::get_lr() const {
  auto point = schedule_->current();
  return {point.ok() ? point->lr : std::nan("")};
}

}  // namespace dscore
