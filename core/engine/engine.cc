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

#include "core/base/failpoint.h"
#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/comm/agreement.h"
#include "core/device/cpu_device.h"
#include "core/engine/flops_probe.h"
#include "core/engine/job_fit.h"
#include "core/engine/phase_timers.h"
#include "core/owned_state/owned_state_factory.h"
#include "core/tensor/square_sum.h"

namespace dscore {
namespace {

// Where the device ops of `stream`'s tasks run.
device::ops::Target ops_target(const device::Device& device, const device::Stream& stream) {
  return device.type() == device::DeviceType::kCuda ? device::ops::Target::cuda(stream.native())
                                                    : device::ops::Target::cpu();
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

Result<std::unique_ptr<Engine>> Engine::create(const config::TrainingConfig& config,
                                               EngineComponents components) {
  if (!components.model) return invalid_argument("the engine needs a model");
  if (!components.optimizer)
    return invalid_argument("the engine needs an optimizer: add an \"optimizer\" section");
  if (!components.comm) return invalid_argument("the engine needs a communicator");
  if (!components.host) return invalid_argument("the engine needs the host context of its plugins");
  EngineScope scope(components.host->identity());
  std::unique_ptr<device::Device> device =
      components.device ? std::move(components.device)
                        : std::make_unique<device::CpuDevice>(device::CpuStreams::kAsynchronous);
  // Where the state lives, decided once for this run's device.
  const config::Placement placement = config::make_placement(config, device->memory_is_host());
  if (auto unsupported = config::unsupported_features(config, placement, components.run);
      !unsupported.empty())
    return unimplemented(unsupported.front().path + ": " + unsupported.front().message);
  std::unique_ptr<Engine> engine(new Engine(config, placement));
  engine->host_ = std::move(components.host);
  engine->comm_ = std::move(components.comm);
  // The job's ranks as a grid of parallel axes: the pipeline's stages, the
  // data axis, the expert axis inside it, the Ulysses sequence axis and the
  // tensor-parallel (model) axis.
  const int stages = static_cast<int>(config::pipeline_stages_of(config));
  const int tp = static_cast<int>(config::tensor_parallel_size_of(config));
  const int sp = static_cast<int>(config::sequence_parallel_size_of(config));
  const int ep = static_cast<int>(config::expert_parallel_size_of(config));
  DSCORE_ASSIGN_OR_RETURN(comm::ParallelGrid grid,
                          comm::ParallelGrid::pipe_data_expert_sequence_model(
                              stages, ep, sp, tp, engine->comm_->world_size()));
  DSCORE_ASSIGN_OR_RETURN(
      engine->topology_,
      comm::Topology::create(*engine->comm_, grid, comm::Topology::engine_groups()));
  // ZeRO's group is this rank alone when each pipeline stage has one
  // data-parallel rank: a communicator of its own (every rank splits).
  if (engine->topology_->group(comm::groups::kZero) == nullptr) {
    DSCORE_ASSIGN_OR_RETURN(engine->own_group_, engine->comm_->split(engine->comm_->rank(), 0));
  }
  comm::Communicator& zero_group = engine->zero_group();
  engine->host_->set_communicator(DSCORE_GROUP_WORLD, engine->comm_->host_table());
  engine->host_->set_communicator(DSCORE_GROUP_DATA_PARALLEL, zero_group.host_table());
  DSCORE_RETURN_IF_ERROR(engine->lend_model_groups());
  engine->device_ = std::move(device);
  DSCORE_ASSIGN_OR_RETURN(engine->stream_, engine->device_->create_stream("comm"));
  DSCORE_ASSIGN_OR_RETURN(engine->compute_, engine->device_->create_stream("compute"));
  engine->comm_->use_stream(engine->stream_->native());
  if (engine->device_->type() == device::DeviceType::kCuda)
    engine->comm_->stage_host_buffers(host_staging(*engine->device_, *engine->stream_));
  DSCORE_RETURN_IF_ERROR(engine->discover_nodes());  // host buffers: after the staging
  engine->host_->set_device(engine->device_.get());
  if (stages > 1)
    DSCORE_RETURN_IF_ERROR(engine->setup_pipeline(std::move(components.model)));
  else
    engine->model_ = std::move(components.model);
  engine->schedule_ =
      std::make_unique<LrSchedule>(std::move(components.scheduler), components.base_lr);
  engine->monitors_ = MonitorHub(std::move(components.monitors));
  DSCORE_ASSIGN_OR_RETURN(engine->layout_,
                          ParamLayout::from_description(engine->model_->description()));
  if (tp > 1) DSCORE_RETURN_IF_ERROR(engine->check_tensor_split());
  // Before anything is allocated: the plan must fit this node's RAM and
  // disk, and the GPU's memory.
  const Model& model = *engine->model_;
  engine->process_memory_ = measure_process_memory(
      config, model.display_name(),
      [&](bool checkpointing) {
        return model.activation_bytes(config.batch.train_micro_batch_size_per_gpu, checkpointing,
                                      placement.model_dtype, placement.grad_dtype);
      },
      engine->comm_->world_size(), /*in_job=*/true);
  // One decision for the job: a rank whose node cannot hold it ends every
  // rank now, with its reason, instead of leaving the others to wait for it
  // until the comm deadline.
  // A pipeline stage's, a tensor-parallel part's or an expert-parallel
  // rank's state is partitioned over its groups only (job_fit.h stage_fit).
  std::optional<StageFit> stage;
  if (engine->pipelined() || tp > 1 || sp > 1 || ep > 1)
    stage = stage_fit(*engine->topology_, static_cast<int64_t>(engine->pipe_memory_));
  Status fits =
      check_job_fits(config, engine->layout_, state_slots_of(*components.optimizer),
                     engine->comm_->env(), engine->process_memory_, engine->device_.get(), stage);
  if (failpoint_armed("engine.plan_refused", engine->comm_->rank()))
    fits =
        Status(DSCORE_RESOURCE_EXHAUSTED, "the plan does not fit (failpoint engine.plan_refused)");
  DSCORE_RETURN_IF_ERROR(comm::agree(*engine->comm_, fits));
  engine->swapper_ = std::move(components.swapper);
  engine->threads_ = std::move(components.threads);
  if (placement.uses_nvme() && !engine->swapper_)
    return failed_precondition(
        "NVMe offload needs the \"nvme\" swapper plugin: pass EngineComponents::swapper, or "
        "create the engine with dscore::initialize()");
  DSCORE_ASSIGN_OR_RETURN(zero::ZeroContext ctx, engine->zero_context(zero_group));
  DSCORE_ASSIGN_OR_RETURN(engine->strategy_, engine->make_strategy(ctx));
  DSCORE_RETURN_IF_ERROR(engine->strategy_->initialise(*engine->model_));
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<OwnedState> state,
                          engine->make_owned_state(*components.optimizer));
  engine->gradient_hand_off_.connect(state.get());
  DSCORE_ASSIGN_OR_RETURN(
      engine->optimizer_,
      OptimizerRunner::create(std::move(components.optimizer), engine->strategy_.get(),
                              std::move(state), engine->layout_, placement.model_dtype,
                              placement.grad_dtype, placement.stage));
  DSCORE_RETURN_IF_ERROR(engine->setup_preconditioner());
  engine->scaler_ = zero::LossScaler::from_config(config.fp16);
  DSCORE_ASSIGN_OR_RETURN(engine->statistics_,
                          StepStatistics::create(*engine->device_, engine->comm_->world_size()));
  engine->add_own_observers();
  engine->acquired_.assign(engine->layout_.layer_count(), 0);
  return engine;
}

Result<zero::ZeroContext> Engine::zero_context(comm::Communicator& zero_group) {
  zero::ZeroContext ctx;
  ctx.zero = &config_.zero;
  ctx.placement = &placement_;
  ctx.gradient_accumulation_steps = config_.batch.gradient_accumulation_steps;
  ctx.reduction = zero::plan_reduction(config_, zero_group.world_size(), data_parallel_size());
  ctx.layout = &layout_;
  ctx.comm = &zero_group;
  DSCORE_RETURN_IF_ERROR(add_zeropp_groups(zero_group, &ctx));
  ctx.device = device_.get();
  ctx.stream = stream_.get();
  ctx.comm_target = ops_target(*device_, *stream_);
  ctx.compute_target = compute_target();
  if (placement_.params_on_nvme()) {
    ctx.param_swapper = swapper_.get();
    DSCORE_ASSIGN_OR_RETURN(ctx.param_swap_folder,
                            swap_folder(placement_.param_offload.nvme_path,
                                        "zero_optimization.offload_param.nvme_path"));
  }
  if (placement_.parameters == config::Home::kHost && device_->memory_is_host() && rank() == 0)
    log_info(
        "offload_param.device \"cpu\": the parameters are in host memory already (this run "
        "computes on the CPU)");
  // ZeRO-Offload copies gradients as they are reduced: the stage reports
  // them to the optimizer's state, connected once it exists.
  if (placement_.host_offload()) ctx.reduced_gradients = &gradient_hand_off_;
  // A pipeline stage's copies of tied layers (the layout's first layers)
  // count in the norm on the owner's stage only.
  if (tensor_parallel_rank() > 0) ctx.norm_excluded = replicated_ranges();
  if (stage_model_ != nullptr && !stage_model_->tie_copies().empty()) {
    const size_t after = stage_model_->tie_copies().size();
    ctx.norm_skipped = after < layout_.layer_count()
                           ? layout_.params()[layout_.layer_first(after)].offset
                           : layout_.total_numel();
  }
  return ctx;
}

void Engine::add_own_observers() {
  auto clock = std::make_unique<EngineClock>(*stream_);
  clock_ = clock.get();
  own_observers_.push_back(std::move(clock));
  // The flops report is logged before the wall-clock timers' boundary line.
  if (config_.flops_profiler.enabled)
    own_observers_.push_back(std::make_unique<FlopsProbe>(config_, layout_, world_size(), rank(),
                                                          *model_, &global_steps_));
  if (config_.wall_clock_breakdown)
    own_observers_.push_back(std::make_unique<PhaseTimers>(rank(), config_.steps_per_print));
  for (const auto& o : own_observers_) observers_.push_back(o.get());
}

Engine::~Engine() {
  EngineScope scope(host_ ? host_->identity() : nullptr);
  if (compute_) (void)compute_->synchronize();
  if (stream_) (void)stream_->synchronize();
  // The host context may outlive this engine's device (its plugins free
  // their device buffers through it; those stay valid on their own).
  if (host_) host_->set_device(nullptr);
  monitors_.flush();
}

// -------------------------------------------------------------- training

Result<double> Engine::forward_backward(const dscore_batch& batch) {
  EngineScope engine(host_->identity());
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
  DSCORE_RETURN_IF_ERROR(accumulate_metrics());
  loss_accumulator_ += loss / static_cast<double>(gas);
  return loss;
}

Status Engine::forward(const dscore_batch& batch, dscore_tensor* output, double* loss) {
  EngineScope engine(host_->identity());
  const dscore_model_hooks hooks = model_hooks();
  return check_model_call(model_->forward(batch, hooks, loss, output));
}

bool Engine::is_gradient_accumulation_boundary() const {
  return (micro_steps_ + 1) % config_.batch.gradient_accumulation_steps == 0;
}

Status Engine::step() {
  EngineScope engine(host_->identity());
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
  DSCORE_RETURN_IF_ERROR(precondition_gradients(/*before_norm=*/true, 1.0 / scaler_.scale()));
  StepStatistics::Totals totals;
  {
    PhaseScope statistics(observers_, StepPhase::kStatistics);
    DSCORE_ASSIGN_OR_RETURN(
        totals, statistics_->gather(strategy_->gradient_shares(), placement_.grad_dtype,
                                    tensor_parallel_rank() == 0 ? loss_accumulator_ : 0.0,
                                    *compute_, compute_target(), *stream_, *comm_));
  }
  const tensor::SquareSum& total = totals.squares;
  const double loss_sum = totals.loss_sum;
  const double scale = scaler_.scale();
  const double scaled_norm = std::sqrt(total.value());
  const bool overflow = total.non_finite || !std::isfinite(scaled_norm);
  last_grad_norm_ = overflow ? -1.0 : scaled_norm / scale;
  // A tensor-parallel group's first rank alone reports its loss (every
  // rank of the group computed the same). The last stage's ranks alone
  // report a loss under a pipeline. There
  // every rank's is that mean over the data-parallel ranks (DeepSpeed's
  // PipelineEngine reports and monitors agg_train_loss, the last stage's
  // loss averaged over them and broadcast along the pipe).
  last_loss_ = loss_sum / topology_->group_size(comm::groups::kData);
  last_rank_loss_ = pipelined() ? last_loss_ : loss_accumulator_;
  // Under sequence parallelism a rank's loss is its slice's share: its
  // samples' loss is the sum over the sequence group (a pipeline's
  // last_loss_ has summed every share already).
  if (sequence_parallel_size() > 1 && !pipelined())
    DSCORE_RETURN_IF_ERROR(topology_->group(comm::groups::kSequence)
                               ->allreduce({&last_rank_loss_, DSCORE_DTYPE_F64, 1},
                                           {&last_rank_loss_, DSCORE_DTYPE_F64, 1},
                                           DSCORE_REDUCE_SUM));
  loss_accumulator_ = 0;
  DSCORE_RETURN_IF_ERROR(combine_metrics());
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
    DSCORE_RETURN_IF_ERROR(precondition_gradients(/*before_norm=*/false, 1.0 / combined));
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
  r.metrics = last_metrics_;
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
  // The model's own (MoE: Train/Samples/moe/aux_loss, ...), at the
  // post-increment global_samples as lr.
  for (const auto& [name, value] : r.metrics)
    events.push_back({"Train/Samples/" + name, value, r.global_samples});
  return events;
}

std::vector<double> Engine::get_lr() const {
  auto point = schedule_->current();
  return {point.ok() ? point->lr : std::nan("")};
}

Result<std::string> Engine::swap_folder(const std::string& nvme_path, const std::string& setting) {
  // One folder per job (rank 0's process id and a random tag, the same on
  // every rank: engines of one process differ too) and rank.
  if (job_name_.empty()) {
    int64_t job[2] = {static_cast<int64_t>(::getpid()),
                      static_cast<int64_t>(std::random_device{}() & 0xffffff)};
    DSCORE_RETURN_IF_ERROR(comm_->broadcast({job, DSCORE_DTYPE_I64, 2}, 0));
    job_name_ = "dscore-job" + std::to_string(job[0]) + "-" + std::to_string(job[1]);
  }
  if (std::find(leased_paths_.begin(), leased_paths_.end(), nvme_path) == leased_paths_.end()) {
    // What killed runs left here first, then this rank's own record.
    for (const std::string& line :
         offload::reclaim_stale_swap_folders(nvme_path, config_.aio.keep_stale))
      line.rfind("removed ", 0) == 0 ? log_info(line) : log_warning(line);
    auto lease = offload::SwapFolderLease::acquire(nvme_path + "/" + job_name_, rank());
    if (!lease.ok())
      return Status(lease.status().code(), lease.status().message() + "; check " + setting);
    swap_leases_.push_back(std::move(*lease));
    leased_paths_.push_back(nvme_path);
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
  OwnedStateContext context;
  context.placement = &placement_;
  context.sub_group_size = config_.zero.sub_group_size;
  context.strategy = strategy_.get();
  context.model = model_.get();
  context.device = device_.get();
  context.compute = compute_.get();
  context.rank = rank();
  if (placement_.optimizer_on_nvme()) {
    context.swapper = swapper_.get();
    DSCORE_ASSIGN_OR_RETURN(context.swap_folder,
                            swap_folder(placement_.optimizer_offload.nvme_path,
                                        "zero_optimization.offload_optimizer.nvme_path"));
  }
  return dscore::make_owned_state(context, slots, initial);
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
