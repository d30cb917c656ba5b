#include "core/app/planner.h"

#include "core/config/schema.h"
#include "core/engine/job_fit.h"
#include "core/model/model.h"
#include "core/pipeline/partition.h"
#include "core/pipeline/pipe_spec.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/stage_model.h"

namespace dscore {
namespace {

// The model's params set to compute on the CPU, for a model to compute on
// CUDA that cannot be made where no GPU is (one that ignores
// DSCORE_CREATE_DESCRIBE_ONLY): its layout does not depend on where it
// computes.
plugin_host::ValidatedParams on_cpu_params(const plugin_host::PluginInfo& info,
                                           const plugin_host::ValidatedParams& params) {
  json::Value values = params.values();
  values.set("device", json::Value(std::string("cpu")));
  auto schema = config::parse_params_schema(info.params_schema);
  return plugin_host::ValidatedParams::from_object(values, values,
                                                   schema.ok() ? &*schema : nullptr);
}

bool computes_on_cuda(const plugin_host::ValidatedParams& params) {
  const json::Value* device = params.values().find("device");
  return device != nullptr && device->is_string() && device->as_string() == "cuda";
}

// The model made only to describe itself: a model set to compute on CUDA
// declares its GPU memory without a GPU (`dscore plan` on a login node).
// One that still fails there is made on the CPU, its activations then
// unknown (*activations_known false).
Result<std::unique_ptr<plugin_host::ModelInstance>> describe_model(
    const Setup& setup, plugin_host::InstanceContext context, bool* activations_known) {
  context.describe_only = true;
  const plugin_host::PluginInfo& model_info = *setup.selection.model->info;
  const plugin_host::ValidatedParams& model_params = setup.selection.model->params;
  auto model = plugin_host::ModelInstance::create(model_info, model_params, context);
  *activations_known = true;
  if (!model.ok() && computes_on_cuda(model_params)) {
    model = plugin_host::ModelInstance::create(model_info, on_cpu_params(model_info, model_params),
                                               context);
    *activations_known = false;
  }
  return model;
}

// Under tensor parallelism: the parts and the whole model's elements
// (`layout` is part 0's of the model).
void set_tensor_parallel(int tp, const ParamLayout& layout, zero::ZeroPlan* plan) {
  if (tp <= 1) return;
  plan->tensor_parallel = tp;
  for (const ParamEntry& p : layout.params()) plan->whole_numel += p.whole_numel();
}

// The model's own collectives per optimizer step through `chunks` (its
// layers or a stage's), where the model declares them and is split.
std::optional<zero::ModelTraffic> model_traffic(const Model& model,
                                                const std::vector<dscore_pipeline_stage>& chunks,
                                                const config::TrainingConfig& cfg,
                                                bool checkpointing) {
  const int64_t gas = cfg.batch.gradient_accumulation_steps;
  zero::ModelTraffic t;
  for (const dscore_pipeline_stage& chunk : chunks) {
    auto c = model.collective_bytes(chunk, cfg.batch.train_micro_batch_size_per_gpu, checkpointing);
    if (!c.ok()) return std::nullopt;
    t.tensor_parallel_calls += static_cast<int64_t>(c->tensor_parallel_calls) * gas;
    t.tensor_parallel_bytes += static_cast<int64_t>(c->tensor_parallel_bytes) * gas;
    t.sequence_parallel_calls += static_cast<int64_t>(c->sequence_parallel_calls) * gas;
    t.sequence_parallel_bytes += static_cast<int64_t>(c->sequence_parallel_bytes) * gas;
    t.expert_parallel_calls += static_cast<int64_t>(c->expert_parallel_calls) * gas;
    t.expert_parallel_bytes += static_cast<int64_t>(c->expert_parallel_bytes) * gas;
  }
  if (t.tensor_parallel_calls == 0 && t.sequence_parallel_calls == 0 &&
      t.expert_parallel_calls == 0)
    return std::nullopt;
  return t;
}

// Each rank's plan: its stage's layers' state (its tensor-parallel part of
// them), partitioned by ZeRO over the ranks holding the same part (its
// data- and sequence-parallel ranks), and the activations of the
// micro-batches its schedule (1F1B or interleaved) keeps in flight there.
Result<std::vector<zero::ZeroPlan>> plan_pipeline(const Setup& setup, const Model& model,
                                                  const std::vector<zero::StateSlot>& slots,
                                                  const config::Placement& placement,
                                                  const zero::ProcessMemory& process,
                                                  int world_size) {
  const config::TrainingConfig& cfg = *setup.loaded.config;
  DSCORE_ASSIGN_OR_RETURN(const pipeline::PipeSpec spec, pipeline::pipe_spec_of(cfg));
  const pipeline::PipeShape shape = spec.shape;
  const int stages = shape.stages;
  const dscore_model_description& whole = model.description();
  DSCORE_ASSIGN_OR_RETURN(std::vector<size_t> bounds,
                          pipeline::partition_layers(whole, spec.layer_parts(), spec.partition));
  const int tp = static_cast<int>(config::tensor_parallel_size_of(cfg));
  const int sp = static_cast<int>(config::sequence_parallel_size_of(cfg));
  DSCORE_ASSIGN_OR_RETURN(const comm::ParallelGrid grid,
                          comm::ParallelGrid::pipe_data_sequence_model(stages, sp, tp, world_size));
  const int stage_ranks = world_size / stages;
  DSCORE_ASSIGN_OR_RETURN(const ParamLayout whole_layout, ParamLayout::from_description(whole));
  const int64_t micro = cfg.batch.train_micro_batch_size_per_gpu;
  std::vector<zero::ZeroPlan> plans;
  bool all_declared = true;
  for (int stage = 0; stage < stages; ++stage) {
    const pipeline::StageLayers held = pipeline::stage_layers(whole, bounds, stage, stages);
    std::vector<const dscore_model_layer*> storage;
    DSCORE_ASSIGN_OR_RETURN(
        ParamLayout layout,
        ParamLayout::from_description(pipeline::stage_description(whole, held.held, &storage)));
    zero::PipeStagePlan pipe;
    pipe.stage = stage;
    pipe.stages = stages;
    pipe.data_parallel = grid.size(comm::groups::kData);
    pipe.stage_ranks = stage_ranks;
    pipe.virtual_stages = shape.virtual_stages;
    pipe.tied_copies = held.copies.size();
    // The units (micro-batch, chunk) in flight at once, as micro-batches
    // of the whole stage: a unit holds one chunk's activations.
    const std::vector<pipeline::Step> schedule = spec.schedule(stage);
    const int units = pipeline::units_in_flight(schedule);
    pipe.in_flight = (units + shape.virtual_stages - 1) / shape.virtual_stages;
    pipe.micro_batches = shape.micro_batches;
    pipe.bubble = pipeline::bubble_fraction(shape);
    const std::vector<dscore_pipeline_stage> chunks = pipeline::stage_chunks(bounds, stage, stages);
    pipe.layers = pipeline::layer_list(chunks);
    DSCORE_ASSIGN_OR_RETURN(
        const pipeline::StageBoundaryBytes boundary,
        pipeline::stage_boundary_bytes(model, chunks, micro, placement.model_dtype));
    pipe.boundary_in = static_cast<int64_t>(boundary.in);
    pipe.boundary_out = static_cast<int64_t>(boundary.out);
    // The stage's activations: the slots its schedule uses, as the model
    // declares a stage's (else its whole pass per slot).
    std::optional<pipeline::StageActivationBytes> activations;
    if (process.activations) {
      DSCORE_ASSIGN_OR_RETURN(
          activations,
          pipeline::stage_activation_bytes(
              model, chunks, pipeline::slots_per_chunk(schedule, static_cast<int>(chunks.size())),
              micro, process.checkpointing, placement.model_dtype, placement.grad_dtype));
      all_declared = all_declared && activations->declared;
    }
    const uint64_t executor =
        pipeline::executor_bytes(pipeline::pipe_buffers(shape, stage), boundary,
                                 pipeline::layers_bytes(whole, held.tied, placement.grad_dtype));
    for (int rank = stage * stage_ranks; rank < (stage + 1) * stage_ranks; ++rank) {
      zero::ZeroPlan plan =
          zero::make_plan(cfg, placement, layout, slots, grid.size(comm::groups::kZero),
                          grid.rank_in_group(comm::groups::kZero, rank));
      plan.rank = rank;
      plan.world = world_size;
      plan.grid = grid.describe();
      set_tensor_parallel(tp, whole_layout, &plan);
      plan.memory.buffers += static_cast<int64_t>(executor);
      zero::ProcessMemory stage_process = process;
      if (activations) {
        stage_process.activations = static_cast<int64_t>(activations->bytes);
        stage_process.other_setting.reset();  // its note speaks of one micro-batch
      }
      zero::add_process_memory(stage_process, &plan);
      plan.pipe = pipe;
      plan.model_traffic = model_traffic(model, chunks, cfg, process.checkpointing);
      plans.push_back(std::move(plan));
    }
  }
  if (!all_declared)
    plans.front().notes.push_back(
        "under a pipeline a stage's activations are counted as the whole model's declared "
        "activations for each activation slot its schedule uses (an upper bound: " +
        model.display_name() + " declares no stage's own, stage_activation_bytes in model.h)");
  return plans;
}

}  // namespace

Result<std::vector<zero::ZeroPlan>> plan_job(const Setup& setup, int world_size) {
  DSCORE_CHECK(setup.loaded.ok(), "plan_job on a config with errors");
  const config::TrainingConfig& cfg = *setup.loaded.config;
  if (!setup.selection.model)
    return invalid_argument(
        "`dscore plan` needs a \"model\" section: the plan follows the model's parameters");
  if (!setup.selection.optimizer)
    return invalid_argument(
        "`dscore plan` needs an \"optimizer\" section: the plan counts its state");
  plugin_host::InstanceContext context;
  context.seed = cfg.seed;
  context.world_size = world_size;
  bool activations_known = true;
  DSCORE_ASSIGN_OR_RETURN(auto instance, describe_model(setup, context, &activations_known));
  const std::unique_ptr<Model> model = make_plugin_model(std::move(instance));
  DSCORE_ASSIGN_OR_RETURN(auto optimizer, plugin_host::OptimizerInstance::create(
                                              *setup.selection.optimizer->info,
                                              setup.selection.optimizer->params, context));
  DSCORE_ASSIGN_OR_RETURN(ParamLayout layout, ParamLayout::from_description(model->description()));
  const std::vector<zero::StateSlot> slots = state_slots_of(*optimizer);
  const config::Placement placement = config::make_placement(cfg);
  // Measured now: this process has loaded the plugins a rank loads.
  const int64_t micro = cfg.batch.train_micro_batch_size_per_gpu;
  const zero::ProcessMemory process = measure_process_memory(
      cfg, model->display_name(),
      [&](bool checkpointing) -> Result<uint64_t> {
        // Made on the CPU, the model would declare its CPU compute's.
        if (!activations_known) return Status(DSCORE_UNIMPLEMENTED, "made on the CPU");
        return model->activation_bytes(micro, checkpointing, placement.model_dtype,
                                       placement.grad_dtype);
      },
      world_size,
      /*in_job=*/false);
  const int stages = static_cast<int>(config::pipeline_stages_of(cfg));
  if (stages > 1) return plan_pipeline(setup, *model, slots, placement, process, world_size);
  // Under tensor parallelism each rank holds its part of the model (the
  // model made here is part 0's), partitioned by ZeRO over the
  // data-parallel (and sequence-parallel) ranks of that part; under
  // sequence parallelism its activations are its slice's.
  const int tp = static_cast<int>(config::tensor_parallel_size_of(cfg));
  const int sp = static_cast<int>(config::sequence_parallel_size_of(cfg));
  const int ep = static_cast<int>(config::expert_parallel_size_of(cfg));
  DSCORE_ASSIGN_OR_RETURN(
      const comm::ParallelGrid grid,
      comm::ParallelGrid::pipe_data_expert_sequence_model(1, ep, sp, tp, world_size));
  const std::optional<zero::ModelTraffic> traffic = model_traffic(
      *model,
      {dscore_pipeline_stage{sizeof(dscore_pipeline_stage), 0, model->description().layer_count}},
      cfg, process.checkpointing);
  std::vector<zero::ZeroPlan> plans;
  for (int rank = 0; rank < world_size; ++rank) {
    // Under expert parallelism the experts' state over their
    // expert-data-parallel ranks (the model made here holds expert rank 0's).
    const int zero_ranks = grid.size(comm::groups::kZero);
    const int zero_rank = grid.rank_in_group(comm::groups::kZero, rank);
    plans.push_back(ep > 1 ? zero::make_expert_parallel_plan(
                                 cfg, placement, layout, slots, zero_ranks, zero_rank,
                                 grid.size(comm::groups::kExpertData),
                                 grid.rank_in_group(comm::groups::kExpertData, rank))
                           : zero::make_plan(cfg, placement, layout, slots, zero_ranks, zero_rank));
    plans.back().rank = rank;
    plans.back().world = world_size;
    plans.back().grid = grid.describe();
    set_tensor_parallel(tp, layout, &plans.back());
    plans.back().model_traffic = traffic;
    zero::add_process_memory(process, &plans.back());
  }
  return plans;
}

}  // namespace dscore

namespace dscore {

Result<std::optional<double>> forward_flops_per_sample(const Setup& setup) {
  if (!setup.selection.model) return std::optional<double>();
  plugin_host::InstanceContext context;
  context.seed = setup.loaded.config->seed;
  context.world_size = setup.job.world_size;
  bool activations_known = true;
  DSCORE_ASSIGN_OR_RETURN(auto model, describe_model(setup, context, &activations_known));
  double flops = 0;
  for (size_t layer = 0; layer < model->description().layer_count; ++layer) {
    auto f = model->layer_flops(layer, 1);
    if (!f.ok()) return std::optional<double>();
    flops += *f;
  }
  return std::optional<double>(flops);
}

Result<std::optional<KvCachePlan>> kv_cache_per_sequence(const Setup& setup) {
  if (!setup.selection.model) return std::optional<KvCachePlan>();
  plugin_host::InstanceContext context;
  context.seed = setup.loaded.config->seed;
  context.world_size = setup.job.world_size;
  bool activations_known = true;
  DSCORE_ASSIGN_OR_RETURN(auto model, describe_model(setup, context, &activations_known));
  const dscore_model_description& d = model->description();
  if (d.input_count != 1 || d.inputs[0]->ndim != 1) return std::optional<KvCachePlan>();
  KvCachePlan plan;
  plan.context = d.inputs[0]->shape[0] - 1;  // a token model's block_size + 1 inputs
  auto bytes = model->decode_cache_bytes(1, plan.context, DSCORE_DTYPE_F32);
  if (!bytes.ok()) return std::optional<KvCachePlan>();
  plan.bytes_per_sequence = *bytes;
  return std::optional<KvCachePlan>(plan);
}

}  // namespace dscore
