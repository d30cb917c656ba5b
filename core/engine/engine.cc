// Engine: creation, the model's hooks, forward_backward, and step() with
// its accumulation-boundary work (norm, loss scale, clipping, update). The
// step's observers (step_observer.h) are told each phase; checkpoints are
// engine_checkpoint.cc.
#include "core/engine/engine.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string_view>

#include <unistd.h>

#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/device/cpu_device.h"
#include "core/engine/flops_probe.h"
#include "core/engine/host_offload_state.h"
#include "core/engine/nvme_state.h"
#include "core/engine/partial_offload_state.h"
#include "core/engine/phase_timers.h"
#include "core/engine/planner.h"
#include "core/tensor/square_sum.h"

namespace dscore {
namespace {

// Tells every observer that `phase` begins now and ends with the scope.
class PhaseScope {
 public:
  PhaseScope(const std::vector<StepObserver*>& observers, StepPhase phase)
      : observers_(observers), phase_(phase) {
    for (StepObserver* o : observers_) o->on_phase_begin(phase_);
  }
  ~PhaseScope() {
    for (StepObserver* o : observers_) o->on_phase_end(phase_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  const std::vector<StepObserver*>& observers_;
  StepPhase phase_;
};

// Where the device ops of `stream`'s tasks run.
device::ops::Target ops_target(const device::Device& device, const device::Stream& stream) {
  return device.type() == device::DeviceType::kCuda ? device::ops::Target::cuda(stream.native())
                                                    : device::ops::Target::cpu();
}

// DSCORE_EXPERIMENTAL_CUDA_ENGINE=1 lets "device": "cuda" through: the whole
// CUDA path is built but has not run on a GPU yet, so it is opt-in until a
// GPU session has run tests/core/engine/cuda_engine_test.cc (docs/gpu.md).
bool experimental_cuda_engine() {
  const char* value = std::getenv("DSCORE_EXPERIMENTAL_CUDA_ENGINE");
  return value != nullptr && std::string_view(value) == "1";
}

// On a GPU the collectives' host buffers (agreements, checkpoint gathers,
// the job broadcast) go through device memory: nccl moves nothing else.
comm::HostStaging host_staging(device::Device& device, device::Stream& comm) {
  comm::HostStaging staging;
  staging.device_type = device.tensor_device_type();
  staging.device_id = device.index();
  staging.allocate = [&device](size_t bytes) -> Result<std::shared_ptr<void>> {
    DSCORE_ASSIGN_OR_RETURN(device::Buffer buffer,
                            device.allocate(bytes, device::Placement::kDevice, MemoryUse::kBuffers,
                                            "collective staging", false));
    auto owner = std::make_shared<device::Buffer>(std::move(buffer));
    return std::shared_ptr<void>(owner, owner->data());
  };
  staging.copy = [&device, &comm](void* dst, const void* src, size_t bytes) {
    device.copy(dst, src, bytes, comm);
    return comm.synchronize();
  };
  staging.wait = [&comm] { return comm.synchronize(); };
  return staging;
}

}  // namespace

constexpr const char* kParamOffloadNeedsOptimizerOffload =
    "zero_optimization.offload_param from the GPU needs the optimizer state off the GPU too (the "
    "update runs on the host, where it writes the parameters): set "
    "zero_optimization.offload_optimizer.device to \"cpu\" or \"nvme\"";

std::vector<config::ConfigError> unsupported_features(const config::TrainingConfig& config) {
  std::vector<config::ConfigError> out;
  if (config.zero.offload_param && config.zero.offload_param->device == "nvme" &&
      config.zero.stage == 3 && zero::model_dtype_of(config) == DSCORE_DTYPE_F32)
    out.push_back({"zero_optimization.offload_param.device",
                   {},
                   "parameters on NVMe need a 16-bit model: an fp32 model's parameters are its "
                   "master weights, which the optimizer updates in memory; enable \"bf16\" (or "
                   "\"fp16\"), or set \"device\": \"none\""});
  if (config.device == "cuda" && !experimental_cuda_engine())
    out.push_back({"device",
                   {},
                   "the engine does not train on CUDA yet: ZeRO's buffers, the optimizer and the "
                   "model's views are on the device, but that path has never run on a GPU "
                   "(docs/gpu.md, \"Where the engine stands\"); set \"device\": \"cpu\" (or "
                   "\"auto\"), or DSCORE_EXPERIMENTAL_CUDA_ENGINE=1 to try it"});
  if (config.device == "cuda" && experimental_cuda_engine() && config.comm.backend != "nccl")
    out.push_back({"comm.backend",
                   {},
                   "on \"device\": \"cuda\" the collectives move device memory: set \"comm\": "
                   "{\"backend\": \"nccl\"} (got \"" +
                       config.comm.backend + "\")"});
  const auto offloads = [](const std::optional<config::OffloadConfig>& offload) {
    return offload && offload->device != "none";
  };
  if (config.device == "cuda" && experimental_cuda_engine()) {
    const auto& o = config.zero.offload_optimizer;
    if (offloads(o) && o->device == "cpu" && !zero::host_offload(config))
      out.push_back({"zero_optimization.offload_optimizer.device",
                     {},
                     "ZeRO-Offload needs ZeRO stage 1, 2 or 3: set "
                     "\"zero_optimization\": {\"stage\": 1} or higher"});
    if (offloads(config.zero.offload_param) && config.zero.stage == 3 && !offloads(o))
      out.push_back(
          {"zero_optimization.offload_param.device", {}, kParamOffloadNeedsOptimizerOffload});
  }
  if (config.checkpoint.load_universal)
    out.push_back(
        {"checkpoint.load_universal",
         {},
         "dscore checkpoints load at any world size and stage without a universal-checkpoint "
         "conversion; remove checkpoint.load_universal (DeepSpeed universal checkpoints are not "
         "read)"});
  if (config.checkpoint.use_node_local_storage)
    out.push_back({"checkpoint.use_node_local_storage",
                   {},
                   "checkpoints need one folder every rank sees (a shared filesystem); node-local "
                   "storage is not "
                   "available yet: remove checkpoint.use_node_local_storage"});
  if (config.communication_data_type) {
    const std::string grad = sdk::dtype_name(zero::grad_dtype_of(config));
    if (*config.communication_data_type != grad)
      out.push_back({"communication_data_type",
                     {},
                     "dscore reduces gradients in their accumulation dtype (" + grad +
                         " here); remove communication_data_type or set "
                         "data_types.grad_accum_dtype to \"" +
                         *config.communication_data_type + "\""});
  }
  return out;
}

Result<std::unique_ptr<Engine>> Engine::create(const config::TrainingConfig& config,
                                               EngineComponents components) {
  if (auto unsupported = unsupported_features(config); !unsupported.empty())
    return unimplemented(unsupported.front().path + ": " + unsupported.front().message);
  if (!components.model) return invalid_argument("the engine needs a model");
  if (!components.optimizer)
    return invalid_argument("the engine needs an optimizer: add an \"optimizer\" section");
  if (!components.comm) return invalid_argument("the engine needs a communicator");
  if (!components.host) return invalid_argument("the engine needs the host context of its plugins");
  std::unique_ptr<Engine> engine(new Engine(config));
  engine->host_ = std::move(components.host);
  engine->comm_ = std::move(components.comm);
  // One data-parallel group spanning the world until model parallelism.
  engine->host_->set_communicator(DSCORE_GROUP_WORLD, engine->comm_->host_table());
  engine->host_->set_communicator(DSCORE_GROUP_DATA_PARALLEL, engine->comm_->host_table());
  engine->device_ = components.device
                        ? std::move(components.device)
                        : std::make_unique<device::CpuDevice>(device::CpuStreams::kAsynchronous);
  DSCORE_ASSIGN_OR_RETURN(engine->stream_, engine->device_->create_stream("comm"));
  DSCORE_ASSIGN_OR_RETURN(engine->compute_, engine->device_->create_stream("compute"));
  engine->comm_->use_stream(engine->stream_->native());
  if (engine->device_->type() == device::DeviceType::kCuda)
    engine->comm_->stage_host_buffers(host_staging(*engine->device_, *engine->stream_));
  engine->host_->set_device(engine->device_.get());
  engine->model_ = std::move(components.model);
  engine->schedule_ =
      std::make_unique<LrSchedule>(std::move(components.scheduler), components.base_lr);
  engine->monitors_ = MonitorHub(std::move(components.monitors));
  DSCORE_ASSIGN_OR_RETURN(engine->layout_,
                          ParamLayout::from_description(engine->model_->description()));
  // Before anything is allocated: the plan must fit this node's RAM and
  // disk, and the GPU's memory.
  const Model& model = *engine->model_;
  engine->process_memory_ = measure_process_memory(
      config, model.display_name(),
      [&](bool checkpointing) {
        return model.activation_bytes(config.batch.train_micro_batch_size_per_gpu, checkpointing,
                                      zero::model_dtype_of(config), zero::grad_dtype_of(config));
      },
      engine->comm_->world_size(), /*in_job=*/true);
  DSCORE_RETURN_IF_ERROR(check_job_fits(config, engine->layout_,
                                        state_slots_of(*components.optimizer), engine->comm_->env(),
                                        engine->process_memory_, engine->device_.get()));
  zero::ZeroContext ctx;
  ctx.config = &engine->config_;
  ctx.layout = &engine->layout_;
  ctx.comm = engine->comm_.get();
  ctx.device = engine->device_.get();
  ctx.stream = engine->stream_.get();
  ctx.comm_target = ops_target(*engine->device_, *engine->stream_);
  ctx.compute_target = ops_target(*engine->device_, *engine->compute_);
  ctx.model_dtype = zero::model_dtype_of(config);
  ctx.grad_dtype = zero::grad_dtype_of(config);
  const bool optimizer_on_nvme =
      config.zero.offload_optimizer && config.zero.offload_optimizer->device == "nvme";
  // On NVMe or, with ZeRO-Offload, in host memory (host_offload_state.h).
  ctx.master_elsewhere = optimizer_on_nvme || zero::host_offload(config);
  const bool params_on_nvme = config.zero.stage == 3 && config.zero.offload_param &&
                              config.zero.offload_param->device == "nvme";
  engine->swapper_ = std::move(components.swapper);
  engine->threads_ = std::move(components.threads);
  if ((optimizer_on_nvme || params_on_nvme) && !engine->swapper_)
    return failed_precondition(
        "NVMe offload needs the \"nvme\" swapper plugin: pass EngineComponents::swapper, or "
        "create the engine with dscore::initialize()");
  if (params_on_nvme) {
    ctx.param_swapper = engine->swapper_.get();
    DSCORE_ASSIGN_OR_RETURN(ctx.param_swap_folder,
                            engine->swap_folder(config.zero.offload_param->nvme_path));
    ctx.param_max_in_cpu = config.zero.offload_param->max_in_cpu;
    ctx.param_buffer_count = config.zero.offload_param->buffer_count;
    ctx.param_buffer_size = config.zero.offload_param->buffer_size;
  }
  const bool params_to_host = config.zero.stage == 3 && config.zero.offload_param &&
                              config.zero.offload_param->device == "cpu";
  if (params_to_host && engine->device_->memory_is_host() && engine->rank() == 0)
    log_info(
        "offload_param.device \"cpu\": the parameters are in host memory already (this run "
        "computes on the CPU)");
  if (!engine->device_->memory_is_host() && (params_to_host || params_on_nvme)) {
    // The update runs on the host, which writes the parameters there.
    if (!optimizer_on_nvme && !zero::host_offload(config))
      return failed_precondition(kParamOffloadNeedsOptimizerOffload);
    ctx.params_on_host = params_to_host;
  }
  if (zero::host_offload(config))  // ZeRO-Offload copies gradients as they are reduced
    ctx.owned_grads_final = [self = engine.get()](
                                const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                const device::EventPtr& ready) {
      if (self->optimizer_) self->optimizer_->state().owned_grads_final(ranges, ready);
    };
  engine->strategy_ = zero::make_zero_strategy(ctx);
  DSCORE_RETURN_IF_ERROR(engine->strategy_->initialise(*engine->model_));
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<OwnedState> state,
                          engine->make_owned_state(*components.optimizer));
  DSCORE_ASSIGN_OR_RETURN(
      engine->optimizer_,
      OptimizerRunner::create(std::move(components.optimizer), engine->strategy_.get(),
                              std::move(state), engine->layout_, ctx.model_dtype, ctx.grad_dtype,
                              config.zero.stage));
  engine->scaler_ = zero::LossScaler::from_config(config.fp16);
  DSCORE_ASSIGN_OR_RETURN(engine->statistics_,
                          StepStatistics::create(*engine->device_, engine->comm_->world_size()));
  auto clock = std::make_unique<EngineClock>(*engine->stream_);
  engine->clock_ = clock.get();
  engine->own_observers_.push_back(std::move(clock));
  // The flops report is logged before the wall-clock timers' boundary line.
  if (config.flops_profiler.enabled)
    engine->own_observers_.push_back(
        std::make_unique<FlopsProbe>(config, engine->layout_, engine->world_size(), engine->rank(),
                                     *engine->model_, &engine->global_steps_));
  if (config.wall_clock_breakdown)
    engine->own_observers_.push_back(
        std::make_unique<PhaseTimers>(engine->rank(), config.steps_per_print));
  for (const auto& o : engine->own_observers_) engine->observers_.push_back(o.get());
  engine->acquired_.assign(engine->layout_.layer_count(), 0);
  return engine;
}

Engine::~Engine() {
  if (compute_) (void)compute_->synchronize();
  if (stream_) (void)stream_->synchronize();
  // The host context may outlive this engine's device (its plugins free
  // their device buffers through it; those stay valid on their own).
  if (host_) host_->set_device(nullptr);
  monitors_.flush();
}

// ---------------------------------------------------------------- hooks

dscore_status Engine::fail_hook(dscore_status code, const std::string& message) {
  if (hook_error_.empty()) hook_error_ = message;
  return code;
}

dscore_status Engine::hook_acquire(void* ctx, size_t layer, dscore_acquire_mode mode,
                                   dscore_layer_views* out) {
  Engine* self = static_cast<Engine*>(ctx);
  PhaseScope hook(self->observers_, StepPhase::kHook);
  if (layer >= self->layout_.layer_count())
    return self->fail_hook(DSCORE_INVALID_ARGUMENT,
                           "acquire(" + std::to_string(layer) + "): the model has only " +
                               std::to_string(self->layout_.layer_count()) + " layers");
  if (out == nullptr || out->struct_size < offsetof(dscore_layer_views, grads) + sizeof(void*))
    return self->fail_hook(DSCORE_INVALID_ARGUMENT,
                           "acquire: views struct missing or struct_size too small");
  for (StepObserver* o : self->observers_) o->on_acquire(layer, mode);
  // A model that computes on the compute stream (the hooks' stream) may
  // take views that are ready in its order: no host wait for a gather.
  const bool stream_ordered =
      out->struct_size >= offsetof(dscore_layer_views, flags) + sizeof(out->flags) &&
      (out->flags & DSCORE_VIEWS_STREAM_ORDERED) != 0 && self->compute_->native() != nullptr;
  Status status =
      self->strategy_->acquire(layer, mode, stream_ordered ? self->compute_.get() : nullptr, out);
  if (!status.ok()) return self->fail_hook(status.code(), status.message());
  for (StepObserver* o : self->observers_) o->on_acquired(layer, mode);
  self->acquired_[layer] += 1;
  return DSCORE_OK;
}

dscore_status Engine::hook_release(void* ctx, size_t layer) {
  Engine* self = static_cast<Engine*>(ctx);
  PhaseScope hook(self->observers_, StepPhase::kHook);
  if (layer >= self->layout_.layer_count() || self->acquired_[layer] == 0)
    return self->fail_hook(DSCORE_FAILED_PRECONDITION,
                           "release(" + std::to_string(layer) + ") without a matching acquire");
  self->acquired_[layer] -= 1;
  for (StepObserver* o : self->observers_) o->on_release(layer);
  self->after_model_work();
  Status status = self->strategy_->release(layer);
  return status.ok() ? DSCORE_OK : self->fail_hook(status.code(), status.message());
}

dscore_status Engine::hook_grads_ready(void* ctx, size_t layer) {
  Engine* self = static_cast<Engine*>(ctx);
  PhaseScope hook(self->observers_, StepPhase::kHook);
  if (layer >= self->layout_.layer_count() || self->acquired_[layer] == 0)
    return self->fail_hook(DSCORE_FAILED_PRECONDITION,
                           "grads_ready(" + std::to_string(layer) + ") on a layer not acquired");
  self->after_model_work();
  Status status = self->strategy_->grads_ready(layer);
  return status.ok() ? DSCORE_OK : self->fail_hook(status.code(), status.message());
}

// On a GPU the model computes on the compute stream (hooks.stream) and may
// hand views back before its work on them is done: what the engine does
// with them next goes on the comm stream (reductions, gathers into reused
// memory, stream-ordered frees), which waits for that work here.
void Engine::after_model_work() {
  if (compute_->native() != nullptr) stream_->wait(compute_->record());
}

dscore_model_hooks Engine::model_hooks() {
  dscore_model_hooks hooks{};
  hooks.struct_size = sizeof hooks;
  hooks.ctx = this;
  hooks.acquire = &Engine::hook_acquire;
  hooks.release = &Engine::hook_release;
  hooks.grads_ready = &Engine::hook_grads_ready;
  hooks.stream = compute_->native();  // a cudaStream_t on a GPU, else NULL
  hook_error_.clear();
  return hooks;
}

// After the model returned: a hook misuse first, then the model's own
// error, then a layer left acquired.
Status Engine::check_model_call(const Status& model_status) {
  if (!hook_error_.empty())
    return Status(DSCORE_INVALID_ARGUMENT,
                  model_->display_name() + " misused the engine's hooks: " + hook_error_);
  DSCORE_RETURN_IF_ERROR(model_status);
  for (size_t l = 0; l < acquired_.size(); ++l) {
    if (acquired_[l] != 0) {
      acquired_.assign(acquired_.size(), 0);
      return Status(DSCORE_INVALID_ARGUMENT, model_->display_name() + " returned with layer " +
                                                 std::to_string(l) +
                                                 " still acquired; every "
                                                 "acquire needs a release");
    }
  }
  return Status::Ok();
}

// -------------------------------------------------------------- training

Result<double> Engine::forward_backward(const dscore_batch& batch) {
  PhaseScope scope(observers_, StepPhase::kForwardBackward);
  const dscore_model_hooks hooks = model_hooks();
  const int64_t gas = config_.batch.gradient_accumulation_steps;
  const bool boundary = is_gradient_accumulation_boundary();
  if (boundary) {
    // The optimizer may take over gradient communication for this update.
    DSCORE_ASSIGN_OR_RETURN(
        const bool reduce, optimizer_->wants_reduced_gradients(global_steps_ - skipped_steps_ + 1));
    DSCORE_RETURN_IF_ERROR(strategy_->set_gradient_reduction(reduce));
  }
  if (boundary) optimizer_->state().boundary_micro_step();
  strategy_->begin_micro_step(boundary);
  double loss = 0;
  // DeepSpeed divides the loss by gas before backward; fp16 scales it.
  Status status =
      model_->forward_backward(batch, hooks, scaler_.scale() / static_cast<double>(gas), &loss);
  // Reductions already queued must finish before anything else happens,
  // also when the model failed.
  Status reduced;
  {
    PhaseScope finish(observers_, StepPhase::kFinishReductions);
    reduced = strategy_->end_micro_step();
  }
  DSCORE_RETURN_IF_ERROR(check_model_call(status));
  DSCORE_RETURN_IF_ERROR(reduced);
  loss_accumulator_ += loss / static_cast<double>(gas);
  return loss;
}

Status Engine::forward(const dscore_batch& batch, dscore_tensor* output, double* loss) {
  const dscore_model_hooks hooks = model_hooks();
  return check_model_call(model_->forward(batch, hooks, loss, output));
}

bool Engine::is_gradient_accumulation_boundary() const {
  return (micro_steps_ + 1) % config_.batch.gradient_accumulation_steps == 0;
}

Status Engine::step() {
  PhaseScope call(observers_, StepPhase::kStepCall);
  const bool boundary = is_gradient_accumulation_boundary();
  micro_steps_ += 1;
  const int64_t samples_before = global_samples_;
  Status status = Status::Ok();
  {
    PhaseScope work(observers_, StepPhase::kStep);
    if (boundary) status = boundary_step();
  }
  if (!status.ok() || !boundary) return status;
  const StepReport report = step_report(samples_before);
  std::vector<ScalarEvent> events = boundary_events(report);
  for (StepObserver* o : observers_) o->on_boundary(report, &events);
  monitors_.write(events);
  for (StepObserver* o : observers_) o->on_step_end(report);
  return Status::Ok();
}

Status Engine::boundary_step() {
  // This rank's share of the squared norm, the overflow flag and its loss,
  // gathered from every rank and combined in rank order: identical on all.
  StepStatistics::Totals totals;
  {
    PhaseScope statistics(observers_, StepPhase::kStatistics);
    DSCORE_ASSIGN_OR_RETURN(
        totals,
        statistics_->gather(strategy_->gradient_share(), zero::grad_dtype_of(config_),
                            loss_accumulator_, *compute_, compute_target(), *stream_, *comm_));
  }
  const int world = comm_->world_size();
  const tensor::SquareSum& total = totals.squares;
  const double loss_sum = totals.loss_sum;
  const double scale = scaler_.scale();
  const double scaled_norm = std::sqrt(total.value());
  const bool overflow = total.non_finite || !std::isfinite(scaled_norm);
  last_grad_norm_ = overflow ? -1.0 : scaled_norm / scale;
  last_rank_loss_ = loss_accumulator_;
  last_loss_ = loss_sum / world;
  loss_accumulator_ = 0;
  // fp16: the scale reacts to this step's outcome first
  // (docs/deepspeed-reference.md#overflow-handling).
  if (config_.fp16.enabled) DSCORE_RETURN_IF_ERROR(scaler_.update(overflow));
  // An overflow (or any non-finite gradient: dscore also skips those in
  // fp32/bf16, see docs/deepspeed-differences.md) skips the update and the
  // schedule on every rank, since every rank computed the same flag.
  last_step_applied_ = !overflow;
  if (last_step_applied_) {
    // Clipping (docs/deepspeed-reference.md#gradient-clipping):
    // combined = S * max(1, (N/S + 1e-6) / c) folds unscaling and clipping into one factor.
    double combined = scale;
    if (config_.gradient_clipping > 0)
      combined = scale * std::max(1.0, (scaled_norm / scale + 1e-6) / config_.gradient_clipping);
    DSCORE_RETURN_IF_ERROR(apply_update(1.0 / combined));
    schedule_->advance();
  } else {
    skipped_steps_ += 1;
    if (rank() == 0)
      log_warning(
          "step " + std::to_string(global_steps_ + 1) +
          (config_.fp16.enabled ? ": fp16 gradient overflow" : ": non-finite gradients") +
          "; the update is skipped" +
          (config_.fp16.enabled ? ", loss scale now " + format_double(scaler_.scale()) : ""));
  }
  {
    PhaseScope statistics(observers_, StepPhase::kStatistics);
    compute_->enqueue([this, target = compute_target()] {
      strategy_->zero_grads(target);
      return Status::Ok();
    });
    // The next micro-step's model reads and writes on the host (until the
    // model's views are device memory: docs/gpu.md).
    DSCORE_RETURN_IF_ERROR(compute_->synchronize());
  }
  global_steps_ += 1;
  global_samples_ += config_.batch.train_batch_size;
  return Status::Ok();
}

Status Engine::apply_update(double grad_scale) {
  DSCORE_ASSIGN_OR_RETURN(dscore_schedule_point point, schedule_->current());
  {
    PhaseScope optimizer(observers_, StepPhase::kOptimizer);
    const int64_t step = global_steps_ - skipped_steps_ + 1;
    // One part, or a partial offload's two: the part kept with the
    // parameters first, then the offloaded one.
    for (OwnedState* part : optimizer_->state().parts()) {
      if (part->on_host()) {
        // ZeRO-Offload: on the host (the default StepTarget), on this
        // thread; the state orders its copies after the compute stream and
        // waits for them before it returns.
        DSCORE_RETURN_IF_ERROR(optimizer_->step(*part, point, step, grad_scale, StepTarget{}));
        continue;
      }
      StepTarget target;
      target.ops = compute_target();
      target.device_type = device_->tensor_device_type();
      target.device_id = device_->index();
      // Synchronised here, so the timer sees the update itself.
      DSCORE_RETURN_IF_ERROR(
          compute_->run([&] { return optimizer_->step(*part, point, step, grad_scale, target); }));
    }
  }
  stream_->wait(compute_->record());  // the new parameters, before they are gathered
  return strategy_->after_update();
}

StepReport Engine::step_report(int64_t samples_before) const {
  StepReport r;
  r.global_steps = global_steps_;
  r.global_samples = global_samples_;
  r.samples_before = samples_before;
  r.skipped_steps = skipped_steps_;
  r.applied = last_step_applied_;
  r.loss = last_loss_;
  r.rank_loss = last_rank_loss_;
  r.grad_norm = last_grad_norm_;
  r.loss_scale = scaler_.scale();
  r.lr = get_lr();
  return r;
}

std::vector<ScalarEvent> Engine::boundary_events(const StepReport& r) const {
  // DeepSpeed: train_loss (rank 0's) at the pre-increment global_samples,
  // lr after the scheduler step and the fp16 loss scale at the
  // post-increment value (docs/deepspeed-reference.md#monitors).
  std::vector<ScalarEvent> events;
  events.push_back({"Train/Samples/train_loss", r.rank_loss, r.samples_before});
  events.push_back({"Train/Samples/lr", r.lr.empty() ? 0.0 : r.lr[0], r.global_samples});
  if (config_.fp16.enabled)
    events.push_back({"Train/Samples/loss_scale", r.loss_scale, r.global_samples});
  return events;
}

std::vector<double> Engine::get_lr() const {
  auto point = schedule_->current();
  return {point.ok() ? point->lr : std::nan("")};
}

Status Engine::gather_parameters(std::vector<float>* out) {
  if (strategy_->owned_master() != nullptr) return strategy_->gather_master(out);
  // The master weights are on NVMe: read this rank's, then gather.
  std::vector<float> owned(static_cast<size_t>(strategy_->owned_numel()));
  DSCORE_RETURN_IF_ERROR(
      optimizer_->state().read(kMasterState, 0, strategy_->owned_numel(), owned.data()));
  return strategy_->gather_owned(owned.data(), out);
}

Result<std::string> Engine::swap_folder(const std::string& nvme_path) {
  // One folder per job (rank 0's process id and a random tag, the same on
  // every rank: engines of one process differ too) and rank.
  if (job_name_.empty()) {
    int64_t job[2] = {static_cast<int64_t>(::getpid()),
                      static_cast<int64_t>(std::random_device{}() & 0xffffff)};
    DSCORE_RETURN_IF_ERROR(comm_->broadcast({job, DSCORE_DTYPE_I64, 2}, 0));
    job_name_ = "dscore-job" + std::to_string(job[0]) + "-" + std::to_string(job[1]);
  }
  return nvme_path + "/" + job_name_ + "/rank" + std::to_string(rank());
}

Result<std::unique_ptr<OwnedState>> Engine::make_owned_state(
    const plugin_host::OptimizerInstance& optimizer) {
  std::vector<zero::StateSlot> slots;
  std::vector<double> initial;
  for (const auto& s : optimizer.slots()) {
    slots.push_back({s.name, s.dtype, s.elements_per_param});
    initial.push_back(s.initial_value);
  }
  const std::optional<config::OffloadConfig>& offload = config_.zero.offload_optimizer;
  const std::string device = offload ? offload->device : "none";
  if (zero::host_offload(config_)) return make_host_offload_state(slots, initial);
  if (device != "nvme") {
    if (device == "cpu" && rank() == 0)
      log_info(
          "offload_optimizer.device \"cpu\" at ZeRO stage 0: the optimizer state stays with "
          "the parameters (ZeRO-Offload needs stage 1, 2 or 3)");
    DSCORE_ASSIGN_OR_RETURN(
        auto state,
        InMemoryState::create(slots, initial, strategy_->owned_numel(), strategy_->owned_master(),
                              device_.get(), compute_.get()));  // after the optimizer's work
    return std::unique_ptr<OwnedState>(std::move(state));
  }
  NvmeStateOptions options;
  DSCORE_ASSIGN_OR_RETURN(options.folder, swap_folder(offload->nvme_path));
  options.sub_group_size = config_.zero.sub_group_size;
  options.pipeline_read = offload->pipeline_read;
  options.pipeline_write = offload->pipeline_write;
  if (!device_->memory_is_host()) {
    DSCORE_ASSIGN_OR_RETURN(DeviceSide side, device_side(offload->pin_memory));
    options.staging = std::move(side);
  }
  const bool fp32 = zero::model_dtype_of(config_) == DSCORE_DTYPE_F32;
  DSCORE_ASSIGN_OR_RETURN(auto state, NvmeState::create(swapper_.get(), options, slots, initial,
                                                        strategy_->owned_numel(),
                                                        fp32 ? strategy_->owned_master() : nullptr,
                                                        *model_, strategy_->owned_segments()));
  log_info("rank " + std::to_string(rank()) + ": optimizer state " + state->describe());
  return std::unique_ptr<OwnedState>(std::move(state));
}

Result<DeviceSide> Engine::device_side(bool pinned) const {
  DeviceSide side;
  side.device = device_.get();
  side.compute = compute_.get();
  side.grads = strategy_->owned_grads();
  side.grad_dtype = zero::grad_dtype_of(config_);
  side.model_dtype = zero::model_dtype_of(config_);
  side.pinned = pinned;
  const bool fp32 = side.model_dtype == DSCORE_DTYPE_F32;
  side.model_params = fp32 ? strategy_->owned_master() : strategy_->owned_params16();
  if (side.model_params == nullptr) {
    if (!strategy_->params16_elsewhere())
      return internal_error("offload: the strategy names no parameters to update");
    side.store_params = [strategy = strategy_.get()](int64_t begin, int64_t count,
                                                     const void* values) {
      return strategy->store_params16(begin, count, values);
    };
  }
  return side;
}

Result<std::unique_ptr<OwnedState>> Engine::make_host_offload_state(
    const std::vector<zero::StateSlot>& slots, const std::vector<double>& initial) {
  HostOffloadOptions options;
  DSCORE_ASSIGN_OR_RETURN(options.side, device_side(config_.zero.offload_optimizer->pin_memory));
  const int64_t owned = strategy_->owned_numel();
  // Partial offload keeps the first `kept` elements with the parameters;
  // the tiles are the offloaded rest's.
  const int64_t kept = zero::kept_on_device_elements(config_, owned);
  options.tile_elements = zero::offload_tile_elements(config_.zero.sub_group_size, owned - kept);
  options.rank = rank();
  const bool fp32 = options.side.model_dtype == DSCORE_DTYPE_F32;
  float* fp32_master = fp32 ? strategy_->owned_master() : nullptr;
  std::unique_ptr<OwnedState> state;
  if (kept > 0) {
    DSCORE_ASSIGN_OR_RETURN(
        state, PartialOffloadState::create(options, kept, slots, initial, owned, fp32_master,
                                           *model_, strategy_->owned_segments()));
  } else {
    DSCORE_ASSIGN_OR_RETURN(
        state, HostOffloadState::create(options, slots, initial, owned, fp32_master, *model_,
                                        strategy_->owned_segments()));
  }
  log_info("rank " + std::to_string(rank()) + ": optimizer state " + state->describe());
  return state;
}

zero::ZeroPlan Engine::plan() const {
  zero::ZeroPlan plan = zero::make_plan(config_, layout_, optimizer_->slots(), comm_->world_size(),
                                        comm_->rank(), device_->memory_is_host());
  zero::add_process_memory(process_memory_, &plan);
  return plan;
}

zero::MemoryPlan Engine::measured_memory() const {
  // What the strategy and the optimizer runner allocated, by the use they gave.
  const MemoryByUse bytes = memory_by_use();
  auto of = [&](MemoryUse use) { return static_cast<int64_t>(bytes[static_cast<size_t>(use)]); };
  zero::MemoryPlan m;
  m.parameters = of(MemoryUse::kParameters);
  m.gradients = of(MemoryUse::kGradients);
  m.master = of(MemoryUse::kMaster);
  m.optimizer = of(MemoryUse::kOptimizerState);
  m.buffers = of(MemoryUse::kBuffers);
  // The tile buffers of NVMe offload and ZeRO-Offload's host gradients and
  // staging are a row of their own in the plan.
  m.offload_tiles = optimizer_->state().transfer_bytes();
  m.optimizer -= m.offload_tiles;
  return m;
}

device::ops::Target Engine::compute_target() const { return ops_target(*device_, *compute_); }

EngineTiming Engine::timing() const { return clock_->timing(); }

void Engine::reset_timing() { clock_->reset(); }

void Engine::add_observer(StepObserver* observer) { observers_.push_back(observer); }

void Engine::remove_observer(StepObserver* observer) {
  observers_.erase(std::remove(observers_.begin(), observers_.end(), observer), observers_.end());
}

void Engine::abort(const std::string& reason) {
  if (comm_) comm_->abort(reason);
}

}  // namespace dscore
