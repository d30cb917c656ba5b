#include "core/app/hf_export.h"
#include "core/engine/environment.h"

#include <filesystem>
#include <map>

#include "core/app/generation.h"
#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/durable_file.h"
#include "core/config/json.h"
#include "core/engine/initialize.h"
#include "core/plugin_host/instances.h"

namespace dscore {

const std::vector<std::string>& hf_side_files() {
  static const std::vector<std::string> kFiles = {"tokenizer.json",
                                                  "tokenizer_config.json",
                                                  "special_tokens_map.json",
                                                  "tokenizer.model",
                                                  "vocab.json",
                                                  "merges.txt",
                                                  "generation_config.json"};
  return kFiles;
}

Result<HfExportResult> export_hf(const std::string& checkpoint_dir, const std::string& out_dir,
                                 const HfExportOptions& options) {
  DSCORE_ASSIGN_OR_RETURN(checkpoint::CheckpointInfo info,
                          checkpoint::open_checkpoint(checkpoint_dir, options.tag));
  const json::Value& saved = info.state.ds_config;
  const json::Value* model_section = saved.find("model");
  if (model_section == nullptr || !model_section->is_object())
    return invalid_argument(info.path + ": the saved config has no \"model\" section");

  // The model plugin, created from the saved config as at one rank (its
  // weights are not initialised: only its names and config are asked).
  InitializeOptions init;
  // DSCORE_TRUST_CONFIG_PLUGIN_PATHS=1 (plugin_host/trust.h).
  init.trust_config_plugin_paths = read_engine_environment().trust_config_plugin_paths;
  init.job = comm::JobEnv{};
  DSCORE_ASSIGN_OR_RETURN(json::Value one_rank, inference_config(saved));
  DSCORE_ASSIGN_OR_RETURN(
      Setup setup,
      prepare_text(json::serialize(one_rank), info.path + "/ds_config", checkpoint_dir, init));
  if (!setup.loaded.ok()) return invalid_argument(format_config_errors(setup.loaded));
  if (!setup.selection.model)
    return invalid_argument(info.path + ": the saved config names no model plugin");
  plugin_host::InstanceContext context;
  context.seed = setup.loaded.config->seed;
  DSCORE_ASSIGN_OR_RETURN(
      auto model, plugin_host::ModelInstance::create(*setup.selection.model->info,
                                                     setup.selection.model->params, context));
  HfExportResult result;
  result.model = model->info().display();
  if (!model->has_hf_export())
    return Status(DSCORE_UNIMPLEMENTED,
                  result.model +
                      " cannot be exported to a Hugging Face folder: the model plugin has no "
                      "Hugging Face form (hf_tensor/hf_config). `dscore zero-to-fp32 " +
                      checkpoint_dir + " OUT` writes its weights in dscore's names instead");

  std::map<std::string, checkpoint::OutputTensor> outputs;
  const dscore_model_description& d = model->description();
  size_t index = 0;
  for (size_t l = 0; l < d.layer_count; ++l) {
    for (size_t i = 0; i < d.layers[l]->param_count; ++i, ++index) {
      DSCORE_ASSIGN_OR_RETURN(auto hf, model->hf_tensor(index));
      outputs[d.layers[l]->params[i]->name] = {hf.name, hf.transpose};
    }
  }
  DSCORE_ASSIGN_OR_RETURN(std::string config, model->hf_config(options.dtype));

  checkpoint::ConsolidateOptions consolidate;
  consolidate.tag = info.tag;
  consolidate.max_shard_bytes = options.max_shard_bytes;
  consolidate.dtype = options.dtype;
  consolidate.output = [&](const std::string& name) -> Result<checkpoint::OutputTensor> {
    auto it = outputs.find(name);
    if (it == outputs.end())
      return invalid_argument(info.path + " holds parameter " + name + ", which " + result.model +
                              " (as the saved config builds it) does not have");
    return it->second;
  };
  DSCORE_ASSIGN_OR_RETURN(result.weights,
                          checkpoint::zero_to_fp32(checkpoint_dir, out_dir, consolidate));
  DSCORE_RETURN_IF_ERROR(checkpoint::write_file_durably(out_dir + "/config.json", config));
  result.weights.files.push_back(out_dir + "/config.json");

  // The tokenizer of the folder the run started from.
  const json::Value* folder = model_section->find("from_pretrained");
  if (folder != nullptr && folder->is_string()) {
    namespace fs = std::filesystem;
    for (const std::string& name : hf_side_files()) {
      const fs::path from = fs::path(folder->as_string()) / name;
      std::error_code ec;
      if (!fs::is_regular_file(from, ec)) continue;
      DSCORE_ASSIGN_OR_RETURN(std::string text,
                              checkpoint::read_text_file(from.string(), 1u << 30));
      DSCORE_RETURN_IF_ERROR(checkpoint::write_file_durably(out_dir + "/" + name, text));
      result.copied.push_back(out_dir + "/" + name);
    }
  }
  return result;
}

}  // namespace dscore
