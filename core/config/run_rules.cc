#include "core/config/run_rules.h"

#include <cctype>

#include <dscore/cpp/dtype.hpp>

namespace dscore::config {

namespace {

// What a pipeline (docs/pipeline.md) does not run with.
void pipeline_unsupported(const TrainingConfig& config, std::vector<ConfigError>* out) {
  if (config.zero.stage >= 2)
    out->push_back({"zero_optimization.stage",
                    {},
                    "ZeRO stage " + std::to_string(config.zero.stage) +
                        " with a pipeline: DeepSpeed refuses it too (stages 2 and 3 partition "
                        "gradients each micro-batch, which the pipeline's schedule defeats); "
                        "use stage 0 or 1"});
  if (config.device == "cuda")
    out->push_back(
        {"device", {}, "pipelines compute on the CPU only so far: set \"device\": \"cpu\""});
}

// What tensor parallelism (docs/parallelism.md) does not run with yet.
void tensor_parallel_unsupported(const TrainingConfig& config, std::vector<ConfigError>* out) {
  if (config.device == "cuda")
    out->push_back({"device",
                    {},
                    "tensor parallelism computes on the CPU only so far: set \"device\": "
                    "\"cpu\""});
}

// What Ulysses sequence parallelism (docs/parallelism.md) does not run with yet.
void sequence_parallel_unsupported(const TrainingConfig& config, std::vector<ConfigError>* out) {
  if (config.device == "cuda")
    out->push_back({"device",
                    {},
                    "sequence parallelism computes on the CPU only so far: set \"device\": "
                    "\"cpu\""});
}

// What expert parallelism (docs/moe.md#expert-parallelism) does not run
// with yet.
void expert_parallel_unsupported(const TrainingConfig& config, const Placement& placement,
                                 std::vector<ConfigError>* out) {
  const auto refuse = [&](const std::string& path, const std::string& what,
                          const std::string& fix) {
    out->push_back({path, {}, "expert parallelism does not run with " + what + " yet: " + fix});
  };
  if (config.device == "cuda") refuse("device", "CUDA", "set \"device\": \"cpu\"");
  if (pipeline_stages_of(config) > 1)
    refuse("pipeline.stages", "a pipeline",
           "train one stage, or set expert_parallel.enabled false");
  if (tensor_parallel_size_of(config) > 1)
    refuse("tensor_parallel.autotp_size", "tensor parallelism",
           "set autotp_size to 1, or expert_parallel.enabled false");
  if (sequence_parallel_size_of(config) > 1)
    refuse("sequence_parallel_size", "sequence parallelism",
           "set it to 1, or expert_parallel.enabled false");
  if (placement.offloads())
    refuse("zero_optimization.offload_optimizer", "CPU or NVMe offload",
           "remove offload_optimizer and offload_param, or set expert_parallel.enabled false");
  // The 1-bit optimizers average every gradient over all the data-parallel
  // ranks themselves; an expert's belong to its expert-data-parallel ranks.
  if (config.optimizer) {
    std::string type = config.optimizer->type;
    for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (type == "onebitadam" || type == "zerooneadam" || type == "onebitlamb")
      refuse("optimizer.type", "a 1-bit optimizer (" + config.optimizer->type + ")",
             "it communicates every gradient over all the data-parallel ranks itself; use Adam, "
             "AdamW or LAMB, or set expert_parallel.enabled false");
  }
}

// What ZeRO++ (docs/multinode.md#zero) runs with.
void zeropp_unsupported(const TrainingConfig& config, const Placement& placement,
                        std::vector<ConfigError>* out) {
  const ZeroConfig& z = config.zero;
  std::vector<std::string> keys;
  if (z.hpz_partition_size > 1) keys.push_back("zero_hpz_partition_size");
  if (z.quantized_weights) keys.push_back("zero_quantized_weights");
  if (z.quantized_gradients) keys.push_back("zero_quantized_gradients");
  if (keys.empty()) return;
  const auto refuse = [&](const std::string& why) {
    for (const std::string& key : keys)
      out->push_back({"zero_optimization." + key, {}, "ZeRO++ " + why});
  };
  if (z.stage != 3)
    refuse("changes stage 3's collectives, and this run is at stage " + std::to_string(z.stage) +
           ": set zero_optimization.stage 3, or remove the key");
  else if (config.device == "cuda")
    refuse("runs on the CPU engine only so far: set \"device\": \"cpu\", or remove the key");
  else if (pipeline_stages_of(config) > 1 || tensor_parallel_size_of(config) > 1 ||
           sequence_parallel_size_of(config) > 1 || expert_parallel_size_of(config) > 1)
    refuse(
        "runs with data parallelism alone so far (no pipeline, tensor, sequence or expert "
        "parallelism): remove the key");
  else if (z.hpz_partition_size > 1 && placement.params_on_nvme())
    out->push_back({"zero_optimization.zero_hpz_partition_size",
                    {},
                    "ZeRO++'s secondary partition does not run with parameters on NVMe: remove "
                    "zero_hpz_partition_size or offload_param"});
}

}  // namespace

std::vector<ConfigError> unsupported_features(const TrainingConfig& config,
                                              const Placement& placement,
                                              const RunOptions& options) {
  std::vector<ConfigError> errors = placement_unsupported(placement);
  std::vector<ConfigError>* out = &errors;
  if (config.device == "cuda" && !options.experimental_cuda_engine)
    out->push_back({"device",
                    {},
                    "the engine does not train on CUDA yet: ZeRO's buffers, the optimizer and the "
                    "model's views are on the device, but that path has never run on a GPU "
                    "(docs/gpu.md, \"Where the engine stands\"); set \"device\": \"cpu\" (or "
                    "\"auto\"), or DSCORE_EXPERIMENTAL_CUDA_ENGINE=1 to try it"});
  if (config.device == "cuda" && options.experimental_cuda_engine && config.comm.backend != "nccl")
    out->push_back({"comm.backend",
                    {},
                    "on \"device\": \"cuda\" the collectives move device memory: set \"comm\": "
                    "{\"backend\": \"nccl\"} (got \"" +
                        config.comm.backend + "\")"});
  if (config.checkpoint.load_universal)
    out->push_back(
        {"checkpoint.load_universal",
         {},
         "dscore checkpoints load at any world size and stage without a universal-checkpoint "
         "conversion; remove checkpoint.load_universal (DeepSpeed universal checkpoints are not "
         "read)"});
  if (config.checkpoint.use_node_local_storage &&
      (pipeline_stages_of(config) > 1 || tensor_parallel_size_of(config) > 1 ||
       expert_parallel_size_of(config) > 1))
    out->push_back({"checkpoint.use_node_local_storage",
                    {},
                    "node-local checkpoints are built for data parallelism (ZeRO 0-3) only: with "
                    "pipeline, tensor or expert parallelism save to a folder every node sees, or "
                    "remove checkpoint.use_node_local_storage"});
  zeropp_unsupported(config, placement, out);
  if (pipeline_stages_of(config) > 1) pipeline_unsupported(config, out);
  if (tensor_parallel_size_of(config) > 1) tensor_parallel_unsupported(config, out);
  if (sequence_parallel_size_of(config) > 1) sequence_parallel_unsupported(config, out);
  if (expert_parallel_size_of(config) > 1) expert_parallel_unsupported(config, placement, out);
  const bool interleaved = config.pipeline.schedule == "interleaved";
  if (config.pipeline.virtual_stages > 1 && !interleaved)
    out->push_back({"pipeline.virtual_stages",
                    {},
                    "virtual_stages " + std::to_string(config.pipeline.virtual_stages) +
                        " needs \"schedule\": \"interleaved\" (the 1F1B schedule runs one chunk "
                        "of layers a stage)"});
  if (interleaved && (pipeline_stages_of(config) < 2 || config.pipeline.virtual_stages < 2))
    out->push_back({"pipeline.schedule",
                    {},
                    "the interleaved schedule needs at least 2 pipeline stages and "
                    "\"virtual_stages\" >= 2 (got " +
                        std::to_string(pipeline_stages_of(config)) + " and " +
                        std::to_string(config.pipeline.virtual_stages) + ")"});
  if (config.communication_data_type) {
    const std::string grad = sdk::dtype_name(placement.grad_dtype);
    if (*config.communication_data_type != grad)
      out->push_back({"communication_data_type",
                      {},
                      "dscore reduces gradients in their accumulation dtype (" + grad +
                          " here); remove communication_data_type or set "
                          "data_types.grad_accum_dtype to \"" +
                          *config.communication_data_type + "\""});
  }
  return errors;
}

std::vector<ConfigError> run_errors(const TrainingConfig& config, const Placement& placement,
                                    const RunOptions& options) {
  std::vector<ConfigError> out = placement_errors(placement);
  for (ConfigError& e : unsupported_features(config, placement, options))
    out.push_back(std::move(e));
  return out;
}

std::vector<ConfigError> run_errors(const TrainingConfig& config, const RunOptions& options) {
  return run_errors(config, make_placement(config), options);
}

}  // namespace dscore::config
