#include "core/config/run_rules.h"

#include <dscore/cpp/dtype.hpp>

namespace dscore::config {

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
  if (config.checkpoint.use_node_local_storage)
    out->push_back({"checkpoint.use_node_local_storage",
                    {},
                    "checkpoints need one folder every rank sees (a shared filesystem); node-local "
                    "storage is not "
                    "available yet: remove checkpoint.use_node_local_storage"});
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
