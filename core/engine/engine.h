// The training engine: DeepSpeed's "simplified training API" in C++.
//
//   auto engine = Engine::create(config, std::move(components));
//   for each micro-batch:  loss = engine->forward_backward(batch);  engine->step();
//
// step() is called after EVERY micro-batch, as in DeepSpeed: off the
// gradient-accumulation boundary it only counts; at the boundary it gathers
// the global gradient norm and overflow flag (one small allgather, combined
// in rank order), updates the fp16 loss scale, clips, runs the optimizer
// plugin over this rank's owned part (host-owned state), brings the new
// parameters back (ZeRO stage strategy), advances the LR schedule and
// writes DeepSpeed's monitor events on rank 0. What watches the step from
// outside (wall-clock timers, flops profiler, time accounting, progress)
// hangs off the StepObserver interface (step_observer.h).
//
// Where parameters and gradients live and how they move is the ZeRO
// strategy's job (core/zero: stages 0-2 flat, stage 3 sharded).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/memory.h"
#include "core/base/status.h"
#include "core/checkpoint/training_state.h"
#include "core/comm/communicator.h"
#include "core/comm/node_map.h"
#include "core/comm/topology.h"
#include "core/config/config.h"
#include "core/config/json.h"
#include "core/config/placement.h"
#include "core/config/run_rules.h"
#include "core/config/training_config.h"
#include "core/device/device.h"
#include "core/engine/compute_threads.h"
#include "core/engine/engine_timing.h"
#include "core/engine/lr_schedule.h"
#include "core/engine/monitor_hub.h"
#include "core/engine/optimizer_runner.h"
#include "core/engine/preconditioner.h"
#include "core/engine/step_observer.h"
#include "core/engine/step_statistics.h"
#include "core/model/model.h"
#include "core/offload/stale_swap.h"
#include "core/offload/swapper.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/stage_model.h"
#include "core/plugin_host/host_context.h"
#include "core/plugin_host/instances.h"
#include "core/zero/loss_scaler.h"
#include "core/zero/param_layout.h"
#include "core/zero/plan.h"
#include "core/zero/reduced_gradient_sink.h"
#include "core/zero/zero_strategy.h"

namespace dscore {

// What the engine runs, already created (initialize.h builds these from a
// config and the plugin registry).
struct EngineComponents {
  std::unique_ptr<Model> model;
  std::unique_ptr<plugin_host::OptimizerInstance> optimizer;
  double base_lr = 0;                                         // the optimizer's configured lr
  std::unique_ptr<plugin_host::SchedulerInstance> scheduler;  // optional
  std::vector<std::unique_ptr<plugin_host::MonitorInstance>> monitors;  // rank 0 only
  std::unique_ptr<comm::Communicator> comm;                             // required
  // The context the plugin instances above live in (one per engine); the
  // engine installs comm in it as the world and data-parallel group.
  std::shared_ptr<plugin_host::HostContext> host;  // required
  // Required with "offload_optimizer": {"device": "nvme"}: the I/O of the
  // "nvme" swapper plugin (initialize() loads it with the "aio" section).
  std::unique_ptr<offload::Swapper> swapper;
  // Optional: the rank's thread budget, held for the engine's lifetime
  // (initialize() sets it; compute_threads.h).
  std::unique_ptr<ComputeThreads> threads;
  // What the engine computes on (core/device); nullptr: the CPU with
  // asynchronous streams (communication overlaps compute).
  std::unique_ptr<device::Device> device;
  // What the run allows beyond the config (config/run_rules.h): Engine::create
  // refuses what config::run_errors names.
  config::RunOptions run;
};

// Checkpoints (docs/architecture.md#checkpoint, format in core/checkpoint/format.h).
struct SaveCheckpointOptions {
  std::string tag;                                   // "" = "global_step<N>"
  json::Value client_state = json::Value::object();  // the caller's own JSON, returned by load
  bool save_latest = true;                           // update <dir>/latest
};
struct LoadCheckpointOptions {
  std::string tag;  // "" = the one <dir>/latest names
  bool load_optimizer_states = true;
  bool load_lr_scheduler_states = true;
  bool load_module_only = false;  // weights only: no optimizer state, counters or schedule
};
struct LoadedCheckpoint {
  std::string path;  // <dir>/<tag>
  std::string tag;
  int saved_world_size = 0;
  int saved_zero_stage = 0;
  json::Value client_state;
};

class Engine {
 public:
  // Collective (every rank). Builds the layout, allocates this rank's part
  // per the ZeRO stage, and initialises parameters through init_param.
  static Result<std::unique_ptr<Engine>> create(const config::TrainingConfig& config,
                                                EngineComponents components);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Forward and backward of one micro-batch. Returns this rank's mean loss
  // over the micro-batch (unscaled).
  Result<double> forward_backward(const dscore_batch& batch);
  // Forward only (evaluation, generation): the model's output into `output`
  // (the gpt model: last-position logits) and the mean loss into `loss`,
  // each if non-null. Collective under ZeRO-3 (parameters are gathered);
  // outside the training loop it ends ZeRO-3's trace-based prefetching for
  // the run.
  Status forward(const dscore_batch& batch, dscore_tensor* output, double* loss = nullptr);
  // KV-cached generation (Model::decode_cache, decode) on this rank's
  // whole parameters (a one-rank, stage-0 engine: generation's): a cache
  // for the views' dtype, and one step of new tokens through it.
  Result<std::unique_ptr<Model::DecodeCache>> decode_cache(int64_t slots, int64_t max_positions);
  Status decode(Model::DecodeCache& cache, const dscore_decode_batch& batch, dscore_tensor* logits);
  // See the file comment. Collective at the boundary.
  Status step();

  // ---- pipeline parallelism ("pipeline": {"stages": P}, docs/pipeline.md)
  // This rank runs one stage of the model; a training step is one call of
  // train_batch, which runs the stage's schedule (1F1B, or the interleaved
  // one with "schedule": "interleaved") over the
  // gradient_accumulation_steps micro-batches (DeepSpeed's
  // PipelineEngine.train_batch), then the update. `load(micro_batch,
  // buffer)` gives the micro-batch's batch (every stage loads it; the
  // first reads its inputs, the last its targets); it must stay valid
  // until `buffer` is loaded again. Returns this rank's mean loss over the
  // micro-batches on the last stage, 0 elsewhere. Collective over the job.
  using MicroBatchSource =
      std::function<Result<const dscore_batch*>(int64_t micro_batch, int buffer)>;
  Result<double> train_batch(const MicroBatchSource& load);
  bool pipelined() const { return stage_model_ != nullptr; }
  // "pipeline stage 1 of 2" under a pipeline, else empty: for messages.
  std::string pipeline_role() const;
  // This stage's time in its forward and backward passes, and in
  // train_batch, over every batch after the first (which allocates): their
  // ratio is the share of the schedule the stage computes, the rest its
  // bubble and transfers.
  struct PipelineTiming {
    double compute_seconds = 0;
    double batch_seconds = 0;
    int64_t batches = 0;
  };
  PipelineTiming pipeline_timing() const { return pipe_timing_; }
  // The activation buffers this stage cycles through (1 without a pipeline).
  int pipe_buffers() const;
  // True when the next step() call completes an accumulation cycle.
  bool is_gradient_accumulation_boundary() const;

  int64_t global_steps() const { return global_steps_; }
  int64_t global_samples() const { return global_samples_; }
  int64_t micro_steps() const { return micro_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  bool was_step_applied() const { return last_step_applied_; }
  std::vector<double> get_lr() const;  // per parameter group, for the next update
  double get_global_grad_norm() const { return last_grad_norm_; }  // unscaled, before clipping
  double loss_scale() const { return scaler_.scale(); }
  // Mean micro-batch loss of the last completed cycle over all ranks, and
  // this rank's own (DeepSpeed's train_loss is rank 0's).
  double last_loss() const { return last_loss_; }
  double last_rank_loss() const { return last_rank_loss_; }

  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }
  // The batch's data-parallel world (world_size() without a pipeline) and
  // this rank's place in it: a pipeline's stages read the same samples.
  int data_parallel_size() const { return topology_->group_size(comm::groups::kData); }
  int data_parallel_rank() const { return topology_->rank_in_group(comm::groups::kData); }
  // Tensor parallelism (tensor_parallel.autotp_size): the ranks each layer
  // is split over, and this rank's part.
  int tensor_parallel_size() const { return topology_->group_size(comm::groups::kModel); }
  int tensor_parallel_rank() const { return topology_->rank_in_group(comm::groups::kModel); }
  // Ulysses sequence parallelism (sequence_parallel_size): the ranks that
  // split each sample's sequence, and this rank's place among them.
  int sequence_parallel_size() const { return topology_->group_size(comm::groups::kSequence); }
  int sequence_parallel_rank() const { return topology_->rank_in_group(comm::groups::kSequence); }
  int expert_parallel_size() const { return topology_->group_size(comm::groups::kExpert); }
  int expert_parallel_rank() const { return topology_->rank_in_group(comm::groups::kExpert); }
  comm::Communicator& communicator() { return *comm_; }
  const ParamLayout& layout() const { return layout_; }  // this rank's model (a stage's)
  // The whole model's parameters: layout() but under a pipeline, where
  // the engine holds one stage's, and under expert parallelism with
  // experts held whole, where it holds its expert rank's.
  const ParamLayout& model_layout() const {
    return whole_layout_.params().empty() ? layout_ : whole_layout_;
  }
  const Model& model() const { return *model_; }
  const config::TrainingConfig& config() const { return config_; }
  // Where this run keeps its state (decided once, for its device).
  const config::Placement& placement() const { return placement_; }
  // The job's ranks as a grid of parallel axes, and their groups.
  const comm::Topology& topology() const { return *topology_; }
  // Which ranks share a machine (gathered at create).
  const comm::NodeMap& nodes() const { return nodes_; }

  // Collective; call at an accumulation boundary. Writes <dir>/<tag>/ and
  // then <dir>/latest, crash-safely: until every rank's files are durable
  // the previous checkpoint and `latest` are untouched. A failure on any
  // rank (a full disk) fails the save on every rank, leaves the previous
  // checkpoint as it was, and training can go on.
  Status save_checkpoint(const std::string& dir, const SaveCheckpointOptions& options = {});
  // Collective. Loads a checkpoint saved at any world size and ZeRO stage
  // (re-partitioning), verifying every tensor's checksum. After a failure
  // the engine's state is undefined: do not train it further.
  Result<LoadedCheckpoint> load_checkpoint(const std::string& dir,
                                           const LoadCheckpointOptions& options = {});
  // What this rank planned to hold, and what it holds (counted allocations).
  zero::ZeroPlan plan() const;
  zero::MemoryPlan measured_memory() const;
  // What this engine's plugins hold through host->alloc (by tag: the gpt
  // model's "gpt activations"); the ABI gives no use, so all of it is kOther.
  const MemoryLedger& plugin_memory() const { return host_->memory(); }

  // End every rank of the job after a local fatal error.
  void abort(const std::string& reason);

  // Called after the engine's own observers (time accounting, flops
  // profiler, wall-clock timers), in the order added. Not owned: it must
  // outlive the training calls made while it is added.
  void add_observer(StepObserver* observer);
  void remove_observer(StepObserver* observer);

 private:
  friend struct EngineTesting;  // engine_testing.h: gathers and timing for tests and benches
  Engine(const config::TrainingConfig& config, const config::Placement& placement)
      : config_(config), placement_(placement) {}
  // The whole model's masters and optimizer state (engine_gather.cc):
  // collective, every rank gets the whole model, each tensor whole.
  Status gather_parameters(std::vector<float>* out);
  Status gather_optimizer_state(size_t slot, std::vector<float>* out);
  // This rank's fp32 values in its layout (its stage's, its part's) made
  // the whole model's: the tensor-parallel parts joined over the model
  // group, then the stages over the pipe group.
  Status whole_model(std::vector<float> local, std::vector<float>* out);
  // The parts of split tensors held over `axes` (the model axis's
  // tensor-parallel parts, the expert axis's experts) joined into whole
  // tensors; the group's first rank gives the rest.
  Status join_parts(comm::AxisSet axes, const std::vector<float>& local, std::vector<float>* out);
  Status join_stages(const std::vector<float>& stage, std::vector<float>* out);
  // What the ZeRO stage is given: the placement, the zero section, the
  // data-parallel group, the streams, NVMe's folder.
  Result<zero::ZeroContext> zero_context(comm::Communicator& zero_group);
  // The tensor- and sequence-parallel groups the model is lent
  // (engine_tensor_parallel.cc): one split of the world each.
  Status lend_model_groups();
  // The stage's strategy; under expert parallelism the experts' domain over
  // the expert-data-parallel group (engine_expert_parallel.cc).
  Result<std::unique_ptr<zero::ZeroStrategy>> make_strategy(const zero::ZeroContext& ctx);
  Status check_expert_split() const;
  Status gather_expert_layout();
  Status join_held_experts(const std::vector<float>& local, std::vector<float>* out);
  comm::Communicator& expert_data_group() const {
    return own_expert_group_ ? *own_expert_group_ : *topology_->group(comm::groups::kExpertData);
  }
  // Tensor parallelism (engine_tensor_parallel.cc): the model's split
  // tensors tile their whole tensors over the group (collective), and the
  // flat ranges of this rank's replicated parameters.
  Status check_tensor_split() const;
  // ZeRO's group: the data-parallel ranks of this stage and part (a
  // communicator of its own where that is this rank alone).
  comm::Communicator& zero_group() const {
    return own_group_ ? *own_group_ : *topology_->group(comm::groups::kZero);
  }
  std::vector<std::pair<int64_t, int64_t>> replicated_ranges() const;

  // The optimizer state where the placement puts it (core/owned_state/).
  Result<std::unique_ptr<OwnedState>> make_owned_state(
      const plugin_host::OptimizerInstance& optimizer);
  // The clock, the flops profiler and the wall-clock timers, as configured.
  void add_own_observers();
  // nvme_path/dscore-job<pid>-<tag>/rank<R> (collective: rank 0 names the job).
  // The first time for a path: the stale job folders there reclaimed and
  // this rank's owner record written (offload/stale_swap.h); an error names
  // `setting`, the config key of the path.
  Result<std::string> swap_folder(const std::string& nvme_path, const std::string& setting);
  EngineTiming timing() const;
  void reset_timing();
  Status boundary_step();  // the accumulation boundary's work
  // The model's metrics (model.h): added up after each micro-batch, and at
  // the boundary combined over the data-parallel ranks into last_metrics_.
  Status accumulate_metrics();
  Status combine_metrics();
  Status apply_update(double grad_scale);
  // Muon's whole-matrix step (engine_preconditioning.cc): the plugin sees
  // the gradients times grad_scale; a no-op where the stage runs it at the
  // other point (`before_norm`: stages 1-3) or nothing is preconditioned.
  Status setup_preconditioner();
  Status precondition_gradients(bool before_norm, double grad_scale);
  device::ops::Target compute_target() const;  // where compute_'s tasks run their ops
  StepReport step_report(int64_t samples_before) const;
  std::vector<ScalarEvent> boundary_events(const StepReport& report) const;
  // Checkpoint pieces (engine_checkpoint.cc).
  Status check_at_boundary(const char* what) const;
  Result<std::string> agree_on_tag(const std::string& wanted);
  // Makes the save's staging folder: rank 0's, or under
  // checkpoint.use_node_local_storage each node's (a node whose folder turns
  // out to be one an earlier node made is written there). Whether this rank
  // moves a staging folder into place.
  Result<bool> prepare_save(const std::string& dir, const std::string& staging,
                            const std::string& id);
  // engine_nodes.cc: which machines the ranks are on (collective; logged),
  // and ZeRO++'s groups made from them (collectives of ZeRO's group).
  Status discover_nodes();
  Status add_zeropp_groups(comm::Communicator& zero_group, zero::ZeroContext* ctx);
  Result<comm::Communicator*> secondary_group(comm::Communicator& zero_group);
  Result<zero::QuantizedReduceGroups> quantized_reduce_groups(comm::Communicator& zero_group);
  bool node_local_checkpoints() const;
  Status write_model_states(const std::string& folder, const std::string& name,
                            const std::vector<zero::ParamRun>& runs, checkpoint::FileHeader header,
                            const json::Value& client_state);
  size_t copied_tie_params() const;
  bool saved_elsewhere(size_t param, size_t copied) const;
  static void add_fragment(checkpoint::FileHeader& header,
                           std::vector<checkpoint::TensorData>& tensors, const std::string& slot,
                           const ParamEntry& p, int64_t begin, int64_t numel, int64_t values,
                           dscore_dtype dtype, const void* data, std::vector<int64_t> shape);
  // node_copy: this rank made a node's folder other than rank 0's, and
  // writes rank 0's model states there too (below stage 3).
  Status write_checkpoint_files(const std::string& folder, const std::string& tag,
                                const std::string& id, const json::Value& client_state,
                                bool node_copy);
  checkpoint::TrainingState training_state(const json::Value& client_state) const;
  std::string model_file_of(int rank) const;
  bool writes_model_states(int rank) const;
  Result<LoadedCheckpoint> read_checkpoint(const std::string& dir,
                                           const LoadCheckpointOptions& options);
  Status restore_training_state(const checkpoint::TrainingState& state, const std::string& folder,
                                const LoadCheckpointOptions& options, int saved_world);

  // Pipeline pieces (pipeline_step.cc).
  Status setup_pipeline(std::unique_ptr<Model> model);
  Status run_instruction(const pipeline::Instruction& in, const MicroBatchSource& load);
  Status pipeline_backward(const pipeline::Instruction& in);
  Status open_boundary_step();
  Status reduce_tied_grads();
  Status pipe_transfer(pipeline::Op op, std::vector<std::byte>& buffer, device::EventPtr* sent);
  Status await_pipe_sends(const pipeline::Instruction& in);

  // Model hooks (ctx = Engine*).
  dscore_model_hooks model_hooks();
  // The comm stream waits for the model's work queued so far (on a GPU).
  void after_model_work();
  Status check_model_call(const Status& model_status);
  static dscore_status hook_acquire(void* ctx, size_t layer, dscore_acquire_mode mode,
                                    dscore_layer_views* out);
  static dscore_status hook_release(void* ctx, size_t layer);
  static dscore_status hook_grads_ready(void* ctx, size_t layer);
  dscore_status fail_hook(dscore_status code, const std::string& message);

  config::TrainingConfig config_;
  config::Placement placement_;
  // Declaration order is teardown order in reverse: the strategy (whose
  // buffers the comm thread touches) goes first, then the stream, then comm,
  // then the host context the plugins live in.
  std::shared_ptr<plugin_host::HostContext> host_;
  std::unique_ptr<ComputeThreads> threads_;
  std::unique_ptr<comm::Communicator> comm_;
  std::unique_ptr<comm::Topology> topology_;  // its groups are comm_ or split from it
  comm::NodeMap nodes_;
  std::unique_ptr<comm::Communicator> own_group_;  // ZeRO's group when it is this rank alone
  // The expert-data-parallel group when it is this rank alone.
  std::unique_ptr<comm::Communicator> own_expert_group_;
  // ZeRO++ hpZ's secondary group (engine_nodes.cc), when there is one.
  std::unique_ptr<comm::Communicator> secondary_group_;
  // ZeRO++ qgZ's node and across-node groups, when nodes are even.
  std::unique_ptr<comm::Communicator> node_group_, across_group_;
  // The tensor- and sequence-parallel groups lent to the model (engine.cc).
  std::vector<std::unique_ptr<comm::Communicator>> model_groups_;
  std::unique_ptr<device::Device> device_;
  std::unique_ptr<device::Stream> stream_;   // the comm stream
  std::unique_ptr<device::Stream> compute_;  // the boundary step's buffer work and update
  std::unique_ptr<Model> model_;
  std::unique_ptr<LrSchedule> schedule_;
  MonitorHub monitors_;
  ParamLayout layout_;
  zero::ProcessMemory process_memory_;         // activations and the process, measured at create
  std::unique_ptr<offload::Swapper> swapper_;  // NVMe offload; outlives the strategy and state
  std::string job_name_;                       // of the swap folders (swap_folder)
  // This rank's owner records in its job's swap folders (offload/stale_swap.h);
  // destroyed after the strategy and state that write there.
  std::vector<std::unique_ptr<offload::SwapFolderLease>> swap_leases_;
  std::vector<std::string> leased_paths_;  // the nvme_paths of swap_leases_
  // Where the strategy reports the boundary's reduced gradients; connected
  // to the optimizer's state (ZeRO-Offload copies them as they come).
  zero::GradientHandOff gradient_hand_off_;
  std::unique_ptr<zero::ZeroStrategy> strategy_;
  std::unique_ptr<OptimizerRunner> optimizer_;
  std::unique_ptr<Preconditioner> preconditioner_;  // null: nothing preconditioned
  zero::LossScaler scaler_ = zero::LossScaler::fixed(1.0);
  std::unique_ptr<StepStatistics> statistics_;

  // Pipeline parallelism: the stage this rank runs (model_ itself), its
  // schedule, the ranks that hold its tied layers, and per activation
  // buffer the batch and the boundary tensors (input and its gradient,
  // output and its gradient).
  pipeline::StageModel* stage_model_ = nullptr;
  ParamLayout whole_layout_;  // the whole model's where this rank holds part (model_layout())
  std::vector<pipeline::Step> pipe_schedule_;
  // Interleaved: the stage's chunks run as virtual stages of a ring, the
  // gradients on a communicator of their own (grad_pipe_), and the
  // data-parallel reduction starts after the last backward.
  bool interleaved_ = false;
  std::unique_ptr<comm::Communicator> grad_pipe_;
  std::unique_ptr<comm::Communicator> tie_group_;
  struct PipeBuffer {
    const dscore_batch* batch = nullptr;
    int64_t micro_batch = -1;  // the micro-batch `batch` holds in this train_batch
    std::vector<std::byte> input, input_grad, output, output_grad;
    // The sends of output and input_grad still on the comm stream.
    device::EventPtr output_sent, input_grad_sent;
  };
  std::vector<PipeBuffer> pipe_buffers_;
  pipeline::StageBoundaryBytes pipe_boundary_bytes_;  // a buffer's input, output
  uint64_t pipe_memory_ = 0;         // pipeline::executor_bytes: in the plan's buffers
  bool boundary_step_open_ = false;  // the boundary backward ran; its reductions wait
  PipelineTiming pipe_timing_;
  int64_t pipe_batches_run_ = 0;

  std::vector<int> acquired_;  // per layer: outstanding acquires in this call
  std::string hook_error_;
  // Declared after what they read (stream, model, layout, counters), so they go first.
  std::vector<std::unique_ptr<StepObserver>>
      own_observers_;                     // clock, flops_profiler, wall_clock_breakdown
  std::vector<StepObserver*> observers_;  // those, then add_observer's
  EngineClock* clock_ = nullptr;

  int64_t micro_steps_ = 0;
  int64_t global_steps_ = 0;
  int64_t global_samples_ = 0;
  int64_t skipped_steps_ = 0;
  bool last_step_applied_ = false;
  double loss_accumulator_ = 0;  // this rank: sum over the cycle's micro-batches of loss / gas
  double last_loss_ = 0;
  double last_rank_loss_ = 0;
  double last_grad_norm_ = 0;
  std::vector<Model::Metric> metric_sums_;  // this cycle's, this rank's
  int64_t metric_passes_ = 0;
  std::vector<std::pair<std::string, double>> last_metrics_;
};

}  // namespace dscore
