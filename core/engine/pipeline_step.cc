// Engine::train_batch: one training step of a pipeline stage. The stage
// runs DeepSpeed's 1F1B TrainSchedule (core/pipeline/schedule.h)
// instruction by instruction: micro-batches in, activations forward to the
// next stage and their gradients back, the tied layers' gradients summed
// between the stages that hold them, then the data-parallel reduction and
// the update of the stage's own parameters (ZeRO 0-1 over the stage's
// data-parallel group, the engine's boundary step).
//
// Accumulation: each BackwardPass is one micro-step of the ZeRO strategy
// (begin_micro_step .. end_micro_step), as forward_backward is without a
// pipeline. The last one's bracket stays open until ReduceTiedGrads, so the
// tied layers' summed gradients are what the data-parallel reduction sees.
// Point-to-point transfers and the tied sum run on the comm stream, in
// order with the reductions it carries.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "core/base/engine_scope.h"
#include "core/base/failpoint.h"
#include "core/base/logging.h"
#include "core/device/ops.h"
#include "core/engine/engine.h"
#include "core/pipeline/partition.h"
#include "core/pipeline/pipe_spec.h"
#include "core/pipeline/simulate.h"
#include "core/zero/zero_memory.h"

namespace dscore {

std::string Engine::pipeline_role() const {
  if (!pipelined()) return "";
  return "pipeline stage " + std::to_string(stage_model_->stage()) + " of " +
         std::to_string(stage_model_->stages());
}

int Engine::pipe_buffers() const {
  return pipelined() ? static_cast<int>(pipe_buffers_.size()) : 1;
}

Status Engine::setup_pipeline(std::unique_ptr<Model> model) {
  const int stages = topology_->group_size(comm::groups::kPipe);
  const int stage = topology_->rank_in_group(comm::groups::kPipe);
  DSCORE_ASSIGN_OR_RETURN(const pipeline::PipeSpec spec, pipeline::pipe_spec_of(config_));
  interleaved_ = spec.interleaved;
  const pipeline::PipeShape shape = spec.shape;
  DSCORE_ASSIGN_OR_RETURN(
      std::vector<size_t> bounds,
      pipeline::partition_layers(model->description(), spec.layer_parts(), spec.partition));
  const std::string name = model->display_name();
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<pipeline::StageModel> stage_model,
                          pipeline::StageModel::create(std::move(model), bounds, stage, stages));
  DSCORE_ASSIGN_OR_RETURN(whole_layout_,
                          ParamLayout::from_description(stage_model->whole().description()));
  stage_model_ = stage_model.get();
  model_ = std::move(stage_model);
  if (rank() == 0)
    log_info(
        "pipeline: " + name + " in " + std::to_string(stages) + " stages x " +
        std::to_string(topology_->group_size(comm::groups::kData)) + " data-parallel, " +
        (interleaved_
             ? "interleaved schedule, " + std::to_string(shape.virtual_stages) + " chunks a stage, "
             : std::string("1F1B schedule, ")) +
        "partition \"" + spec.partition + "\" (" + pipeline::partition_text(bounds, stages) + ")");
  comm::Communicator* pipe = topology_->group(comm::groups::kPipe);
  // The ranks holding a tie: its owner's stage and its reader's, one
  // group per data-parallel coordinate (all of the pipe group takes part
  // in the split).
  auto tied = pipeline::tied_stages(stage_model_->whole().description(), bounds, stages);
  if (!tied.ok()) return Status(tied.status().code(), name + ": " + tied.status().message());
  if (*tied) {
    const int color = stage_model_->tied_layers().empty() ? DSCORE_COMM_SPLIT_NONE : 0;
    DSCORE_ASSIGN_OR_RETURN(tie_group_, pipe->split(color, stage));
  }
  if (interleaved_) {
    DSCORE_ASSIGN_OR_RETURN(grad_pipe_, pipe->split(0, stage));
  }
  std::vector<std::vector<pipeline::Step>> schedules;
  for (int s = 0; s < stages; ++s) schedules.push_back(spec.schedule(s));
  // Every stage's schedule against the others, sends waiting for their
  // receives (the worst a backend does): a schedule that would deadlock or
  // mismatch its messages never starts.
  const pipeline::Simulation check =
      pipeline::simulate(shape, schedules, {}, pipeline::Delivery::kRendezvous);
  if (!check.ok()) return internal_error("the pipeline's schedule fails its check: " + check.error);
  pipe_schedule_ = std::move(schedules[static_cast<size_t>(stage)]);
  stage_model_->set_slots(pipeline::slots_per_chunk(pipe_schedule_, stage_model_->chunk_count()));
  // The boundary tensors of one micro-batch: the largest of the chunks'.
  // Their memory is taken at the first train_batch: the process's own
  // memory, measured before, must not count it.
  DSCORE_ASSIGN_OR_RETURN(pipe_boundary_bytes_, pipeline::stage_boundary_bytes(
                                                    stage_model_->whole(), stage_model_->chunks(),
                                                    config_.batch.train_micro_batch_size_per_gpu,
                                                    placement_.model_dtype));
  pipe_buffers_.resize(static_cast<size_t>(pipeline::pipe_buffers(shape, stage)));
  pipe_memory_ = pipeline::executor_bytes(
      static_cast<int>(pipe_buffers_.size()), pipe_boundary_bytes_,
      pipeline::layers_bytes(stage_model_->description(), stage_model_->tied_layers(),
                             placement_.grad_dtype));
  return Status::Ok();
}

// Activations go to the next virtual stage (the next stage, or from the
// last stage round to the first), gradients back; under the interleaved
// schedule the gradients on grad_pipe_. Every transfer runs on the comm
// stream in the schedule's order (the order checked for deadlocks); a
// receive is waited for, a send is not: *sent marks its end, and the
// buffer it reads is rewritten only after it (the next pass into it), so
// the stage computes while its send waits for the receiver.
Status Engine::pipe_transfer(pipeline::Op op, std::vector<std::byte>& buffer,
                             device::EventPtr* sent) {
  using pipeline::Op;
  const int stage = stage_model_->stage(), stages = stage_model_->stages();
  const bool send = op == Op::kSendActivation || op == Op::kSendGrad;
  const bool towards_next = op == Op::kSendActivation || op == Op::kRecvGrad;
  const int peer = towards_next ? (stage + 1) % stages : (stage + stages - 1) % stages;
  const bool grads = op == Op::kSendGrad || op == Op::kRecvGrad;
  comm::Communicator* comm =
      grads && grad_pipe_ != nullptr ? grad_pipe_.get() : topology_->group(comm::groups::kPipe);
  const comm::CommBuffer bytes = zero::device_buffer(nullptr, buffer.data(), DSCORE_DTYPE_U8,
                                                     static_cast<int64_t>(buffer.size()));
  const std::string what =
      "pipeline stage " + std::to_string(stage) + " (rank " + std::to_string(rank()) + ") " +
      (send ? "sending to" : "receiving from") + " stage " + std::to_string(peer) + ": ";
  device::Stream::Task transfer = [comm, bytes, peer, send, what] {
    const Status status = send ? comm->send(bytes, peer) : comm->recv(bytes, peer);
    return status.ok() ? status : Status(status.code(), what + status.message());
  };
  if (send) {
    *sent = stream_->submit(std::move(transfer));
    return Status::Ok();
  }
  return stream_->run(std::move(transfer));
}

// The accumulation boundary's micro-step: its reductions reduce.
Status Engine::open_boundary_step() {
  DSCORE_ASSIGN_OR_RETURN(const bool reduce,
                          optimizer_->wants_reduced_gradients(global_steps_ - skipped_steps_ + 1));
  DSCORE_RETURN_IF_ERROR(strategy_->set_gradient_reduction(reduce));
  optimizer_->state().boundary_micro_step();
  strategy_->begin_micro_step(true);
  boundary_step_open_ = true;
  return Status::Ok();
}

// Under 1F1B the last backward is the boundary micro-step (its layers'
// reductions start as their gradients are ready); under the interleaved
// schedule a stage's chunks finish at different backwards, so every
// backward accumulates and the reductions start after the last
// (reduce_tied_grads), as DeepSpeed's ReduceGrads does.
Status Engine::pipeline_backward(const pipeline::Instruction& in) {
  PipeBuffer& b = pipe_buffers_[static_cast<size_t>(in.buffer)];
  const int64_t gas = config_.batch.gradient_accumulation_steps;
  const bool boundary = !interleaved_ && in.micro_batch + 1 == gas;
  if (boundary) {
    DSCORE_RETURN_IF_ERROR(open_boundary_step());
  } else {
    strategy_->begin_micro_step(false);
  }
  stage_model_->hold_tied_grads(boundary && tie_group_ != nullptr);
  const dscore_model_hooks hooks = model_hooks();
  double loss = 0;
  Status status = model_->stage_backward(
      stage_model_->chunk(in.chunk), static_cast<size_t>(in.buffer), *b.batch, hooks,
      scaler_.scale() / static_cast<double>(gas),
      stage_model_->is_last(in.chunk) ? nullptr : b.output_grad.data(),
      stage_model_->is_first(in.chunk) ? nullptr : b.input_grad.data(), &loss);
  stage_model_->hold_tied_grads(false);
  Status reduced;
  if (!boundary || !status.ok() || !hook_error_.empty()) {
    boundary_step_open_ = false;
    PhaseScope finish(observers_, StepPhase::kFinishReductions);
    reduced = strategy_->end_micro_step();
  }  // else ended by ReduceTiedGrads
  DSCORE_RETURN_IF_ERROR(check_model_call(status));
  DSCORE_RETURN_IF_ERROR(reduced);
  loss_accumulator_ += loss / static_cast<double>(gas);
  return Status::Ok();
}

// The tied layers' accumulated gradients summed over the stages that hold
// them (each acquired for backward, summed in place, reported ready: the
// data-parallel reduction starts), then the boundary micro-step ends.
// Interleaved, the boundary micro-step opens here and every layer is
// reported ready (its gradients accumulated over the schedule).
Status Engine::reduce_tied_grads() {
  if (interleaved_) DSCORE_RETURN_IF_ERROR(open_boundary_step());
  if (!boundary_step_open_) return internal_error("ReduceTiedGrads before the last backward");
  boundary_step_open_ = false;
  std::vector<size_t> layers = stage_model_->tied_layers();
  if (interleaved_) {
    layers.resize(stage_model_->description().layer_count);
    for (size_t l = 0; l < layers.size(); ++l) layers[l] = layers.size() - 1 - l;
  }
  Status status = Status::Ok();
  const dscore_model_hooks hooks = model_hooks();
  for (size_t layer : layers) {
    dscore_layer_views views{};
    views.struct_size = sizeof views;
    if (hooks.acquire(hooks.ctx, layer, DSCORE_ACQUIRE_BACKWARD, &views) != DSCORE_OK) {
      status = internal_error("acquiring layer " + std::to_string(layer) +
                              " for its reduction: " + hook_error_);
      break;
    }
    // This stage's accumulated share of a tied layer (every micro-batch's),
    // summed with the other stage's, then added into the engine's views.
    const std::vector<dscore_tensor*> shares =
        tie_group_ != nullptr ? stage_model_->tied_grads(layer) : std::vector<dscore_tensor*>{};
    for (size_t p = 0; p < shares.size() && p < views.count && status.ok(); ++p) {
      dscore_tensor* share = shares[p];
      const comm::CommBuffer buffer =
          zero::device_buffer(nullptr, share->data, share->dtype, share->numel);
      status =
          stream_->run([&] { return tie_group_->allreduce(buffer, buffer, DSCORE_REDUCE_SUM); });
      if (status.ok())
        device::ops::accumulate(compute_target(), views.grads[p]->data, share->data, share->dtype,
                                share->numel);
    }
    if (status.ok() && hooks.grads_ready(hooks.ctx, layer) != DSCORE_OK)
      status = internal_error("layer " + std::to_string(layer) + ": " + hook_error_);
    (void)hooks.release(hooks.ctx, layer);
    if (!status.ok()) break;
  }
  Status reduced;
  {
    PhaseScope finish(observers_, StepPhase::kFinishReductions);
    reduced = strategy_->end_micro_step();
  }
  DSCORE_RETURN_IF_ERROR(status);
  return reduced;
}

Status Engine::run_instruction(const pipeline::Instruction& in, const MicroBatchSource& load) {
  using pipeline::Op;
  PipeBuffer* b = in.buffer >= 0 ? &pipe_buffers_[static_cast<size_t>(in.buffer)] : nullptr;
  switch (in.op) {
    case Op::kLoadMicroBatch: {
      DSCORE_ASSIGN_OR_RETURN(b->batch, load(in.micro_batch, in.buffer));
      b->micro_batch = in.micro_batch;
      return Status::Ok();
    }
    case Op::kForwardPass: {
      // DeepSpeed loads on the first and last stages only; the stages
      // between read the micro-batch too, for its size.
      if (b->micro_batch != in.micro_batch) {
        DSCORE_ASSIGN_OR_RETURN(b->batch, load(in.micro_batch, in.buffer));
        b->micro_batch = in.micro_batch;
      }
      const dscore_model_hooks hooks = model_hooks();
      return check_model_call(model_->stage_forward(
          stage_model_->chunk(in.chunk), static_cast<size_t>(in.buffer), *b->batch, hooks,
          stage_model_->is_first(in.chunk) ? nullptr : b->input.data(),
          stage_model_->is_last(in.chunk) ? nullptr : b->output.data()));
    }
    case Op::kBackwardPass:
      return pipeline_backward(in);
    case Op::kSendActivation:
      return pipe_transfer(in.op, b->output, &b->output_sent);
    case Op::kRecvActivation:
      return pipe_transfer(in.op, b->input, nullptr);
    case Op::kSendGrad:
      return pipe_transfer(in.op, b->input_grad, &b->input_grad_sent);
    case Op::kRecvGrad:
      return pipe_transfer(in.op, b->output_grad, nullptr);
    case Op::kReduceTiedGrads:
      return reduce_tied_grads();
    case Op::kReduceGrads:  // done as the boundary micro-step ended
      return Status::Ok();
    case Op::kOptimizerStep:
      return Status::Ok();  // train_batch's step() after the schedule
  }
  return internal_error("unknown pipeline instruction");
}

// Before a pass rewrites a buffer a send still reads (the forward's output,
// the backward's input gradient), that send must be done.
Status Engine::await_pipe_sends(const pipeline::Instruction& in) {
  if (in.op != pipeline::Op::kForwardPass && in.op != pipeline::Op::kBackwardPass)
    return Status::Ok();
  PipeBuffer& b = pipe_buffers_[static_cast<size_t>(in.buffer)];
  device::EventPtr& sent = in.op == pipeline::Op::kForwardPass ? b.output_sent : b.input_grad_sent;
  const Status status = device::wait_for(sent);
  sent.reset();
  return status;
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

Result<double> Engine::train_batch(const MicroBatchSource& load) {
  if (!pipelined())
    return failed_precondition(
        "train_batch runs a pipeline's schedule; without \"pipeline\" call forward_backward and "
        "step for each micro-batch");
  // Tests: a stage that stops answering (DSCORE_FAILPOINTS=pipeline.stage_stalls@R);
  // its neighbours' transfers end at the comm deadline, naming the stage.
  while (failpoint_armed("pipeline.stage_stalls", rank()))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    EngineScope engine(host_->identity());
    PhaseScope scope(observers_, StepPhase::kForwardBackward);
    for (PipeBuffer& b : pipe_buffers_) {
      b.micro_batch = -1;
      b.input.resize(pipe_boundary_bytes_.in);
      b.input_grad.resize(pipe_boundary_bytes_.in);
      b.output.resize(pipe_boundary_bytes_.out);
      b.output_grad.resize(pipe_boundary_bytes_.out);
    }
    stage_model_->zero_tied_grads();
    const bool timed = pipe_batches_run_++ > 0;  // the first allocates
    const auto batch_start = std::chrono::steady_clock::now();
    double compute = 0;
    for (const pipeline::Step& step : pipe_schedule_)
      for (const pipeline::Instruction& in : step) {
        // Tests: a stage that dies in the middle of the schedule.
        if (in.op == pipeline::Op::kBackwardPass) failpoint("pipeline.stage_dies", rank());
        Status status = await_pipe_sends(in);
        const auto start = std::chrono::steady_clock::now();
        if (status.ok()) status = run_instruction(in, load);
        if (in.op == pipeline::Op::kForwardPass || in.op == pipeline::Op::kBackwardPass)
          compute += seconds_since(start);
        if (!status.ok()) {
          if (boundary_step_open_) {
            boundary_step_open_ = false;
            (void)strategy_->end_micro_step();
          }
          return status;
        }
      }
    for (PipeBuffer& b : pipe_buffers_) {  // the last sends end the batch
      DSCORE_RETURN_IF_ERROR(device::wait_for(b.output_sent));
      DSCORE_RETURN_IF_ERROR(device::wait_for(b.input_grad_sent));
      b.output_sent.reset();
      b.input_grad_sent.reset();
    }
    if (timed) {
      pipe_timing_.compute_seconds += compute;
      pipe_timing_.batch_seconds += seconds_since(batch_start);
      pipe_timing_.batches += 1;
    }
  }
  const double loss = loss_accumulator_;
  // The gas micro-steps as step() counts them: the last one is the boundary.
  micro_steps_ += config_.batch.gradient_accumulation_steps - 1;
  DSCORE_RETURN_IF_ERROR(step());
  return loss;
}

}  // namespace dscore
