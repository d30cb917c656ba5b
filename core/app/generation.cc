#include "core/app/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/app/batch_generator.h"
#include "core/base/process_heap.h"
#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/durable_file.h"
#include "core/config/json.h"
#include "core/config/placement.h"
#include "core/engine/initialize.h"
#include "core/tensor/tensor_view.h"

namespace dscore {
namespace {

int64_t model_int(const json::Value& model, const char* key) {
  const json::Value* v = model.find(key);
  return v != nullptr && v->is_integral() ? v->as_int() : 0;
}

// SGD without momentum: an engine needs an optimizer, and this one keeps no
// state (the training run's Adam would hold two copies of the model).
json::Value stateless_optimizer() {
  json::Value sgd = json::Value::object();
  sgd.set("type", json::Value("SGD"));
  json::Value params = json::Value::object();
  params.set("lr", json::Value(0.0));
  sgd.set("params", std::move(params));
  return sgd;
}

// ZeRO-Inference: the config offloads parameters (offload_param cpu or
// nvme), so it keeps stage 3 and its offload sections, and the layers are
// gathered from there as they run.
bool offloads_parameters(const json::Value& config) {
  const json::Value* zero = config.find("zero_optimization");
  const json::Value* param =
      zero != nullptr && zero->is_object() ? zero->find("offload_param") : nullptr;
  const json::Value* device =
      param != nullptr && param->is_object() ? param->find("device") : nullptr;
  return device != nullptr && device->is_string() &&
         (device->as_string() == "cpu" || device->as_string() == "nvme");
}

}  // namespace

Result<json::Value> inference_config(json::Value config, const InferenceOffload& offload,
                                     int tensor_parallel) {
  const std::string& device = offload.offload_param;
  if (device == "cpu" || device == "nvme") {
    if (device == "nvme" && offload.nvme_path.empty())
      return invalid_argument("parameters on NVMe need a folder: give --nvme-path DIR");
    json::Value param = json::Value::object();
    param.set("device", json::Value(device));
    if (device == "nvme") {  // read from the disk as each layer runs, none kept in memory
      param.set("nvme_path", json::Value(offload.nvme_path));
      param.set("max_in_cpu", json::Value(0));
    }
    json::Value zero = json::Value::object();
    zero.set("offload_param", std::move(param));
    // Prefetch reaches a layer ahead only when the bucket exceeds the
    // current layer's elements; the live limit (1e9 by default) bounds it.
    zero.set("stage3_prefetch_bucket_size", json::Value(int64_t{1} << 30));
    if (device == "nvme") {  // the fp32 master beside them, out of memory
      json::Value optimizer = json::Value::object();
      optimizer.set("device", json::Value("nvme"));
      optimizer.set("nvme_path", json::Value(offload.nvme_path));
      zero.set("offload_optimizer", std::move(optimizer));
    }
    config.set("zero_optimization", std::move(zero));
  } else if (device == "none") {
    config.erase("zero_optimization");
  } else if (!device.empty()) {
    return invalid_argument("--offload-param " + device + ": expected none, cpu or nvme");
  }
  if (offloads_parameters(config)) {
    // The master weights stay where the config keeps them (offload_optimizer).
    config.find("zero_optimization")->set("stage", json::Value(3));
  } else {
    json::Value zero = json::Value::object();
    zero.set("stage", json::Value(0));
    config.set("zero_optimization", std::move(zero));
  }
  config.set("optimizer", stateless_optimizer());
  config.erase("scheduler");
  config.set("train_batch_size", json::Value(1));
  config.set("train_micro_batch_size_per_gpu", json::Value(1));
  config.set("gradient_accumulation_steps", json::Value(1));
  for (const char* monitor :
       {"tensorboard", "csv_monitor", "wandb", "comet", "comms_logger", "flops_profiler"})
    config.erase(monitor);
  config.erase("checkpoint_dir");
  config.erase("save_interval");
  // One rank holds the whole model: a pipeline's, a tensor-, sequence- or
  // expert-parallel run's checkpoint too (its files hold whole tensors).
  config.erase("pipeline");
  config.erase("pipeline_parallel_size");
  config.erase("tensor_parallel");
  config.erase("sequence_parallel_size");
  config.erase("expert_parallel");
  if (tensor_parallel > 1) {
    json::Value split = json::Value::object();
    split.set("autotp_size", json::Value(tensor_parallel));
    config.set("tensor_parallel", std::move(split));
  }
  return Result<json::Value>(std::move(config));
}

namespace {

// The model's block size and vocabulary: the model section's, else (a model
// read from_pretrained) its input's width and the folder's config.json.
Status resolve_token_sizes(const json::Value& model, const std::string& where,
                           InferenceModel* out) {
  out->block_size = model_int(model, "block_size");
  out->vocab_size = model_int(model, "vocab_size");
  const dscore_model_description& d = out->engine->model().description();
  if (out->block_size <= 0 && d.input_count == 1 && d.inputs[0]->ndim == 1)
    out->block_size = d.inputs[0]->shape[0] - 1;
  const json::Value* folder = model.find("from_pretrained");
  if (out->vocab_size <= 0 && folder != nullptr && folder->is_string()) {
    const std::string path = folder->as_string() + "/config.json";
    DSCORE_ASSIGN_OR_RETURN(std::string text, checkpoint::read_text_file(path, 64u << 20));
    DSCORE_ASSIGN_OR_RETURN(json::Value hf, json::parse(text, path));
    out->vocab_size = model_int(hf, "vocab_size");
  }
  if (out->block_size <= 0 || out->vocab_size <= 0)
    return invalid_argument(where +
                            ": the model has no block_size/vocab_size; `generate` needs a "
                            "token model such as \"gpt\"");
  return Status::Ok();
}

// data.type and the model's from_pretrained folder.
void read_data_type(const json::Value& config, InferenceModel* out) {
  const json::Value* data = config.find("data");
  const json::Value* data_type = data != nullptr ? data->find("type") : nullptr;
  out->data_type = data_type != nullptr && data_type->is_string() ? data_type->as_string() : "";
  const json::Value* model = config.find("model");
  const json::Value* folder = model != nullptr ? model->find("from_pretrained") : nullptr;
  out->from_pretrained = folder != nullptr && folder->is_string() ? folder->as_string() : "";
}

Result<std::unique_ptr<Engine>> inference_engine(const json::Value& config,
                                                 const std::string& source,
                                                 const std::string& base_dir,
                                                 const InferenceOptions& inference) {
  InitializeOptions options;
  // One rank whatever launched us, or the launcher's ranks splitting the model.
  if (inference.tensor_parallel <= 1) options.job = comm::JobEnv{};
  options.environment = inference.environment;
  DSCORE_ASSIGN_OR_RETURN(json::Value engine_config,
                          inference_config(config, inference.offload, inference.tensor_parallel));
  DSCORE_ASSIGN_OR_RETURN(Setup setup,
                          prepare_text(json::serialize(engine_config), source, base_dir, options));
  if (!setup.loaded.ok()) return invalid_argument(format_config_errors(setup.loaded));
  if (inference.heap_policy && !config::make_placement(*setup.loaded.config).offloads())
    DSCORE_RETURN_IF_ERROR(apply_heap_policy_from_env().status());
  return build_engine(setup, nullptr);
}

}  // namespace

Result<InferenceModel> open_for_inference(const std::string& dir, const std::string& tag,
                                          const InferenceOptions& options) {
  DSCORE_ASSIGN_OR_RETURN(checkpoint::CheckpointInfo info, checkpoint::open_checkpoint(dir, tag));
  const json::Value* saved = &info.state.ds_config;  // an object: open_checkpoint checked
  const json::Value* model = saved->find("model");
  if (model == nullptr || !model->is_object())
    return invalid_argument(info.path +
                            ": the saved config has no \"model\" section to generate with");
  InferenceModel out;
  read_data_type(*saved, &out);
  DSCORE_ASSIGN_OR_RETURN(out.engine,
                          inference_engine(*saved, info.path + "/ds_config", dir, options));
  DSCORE_RETURN_IF_ERROR(resolve_token_sizes(*model, info.path, &out));
  LoadCheckpointOptions load;
  load.tag = info.tag;
  load.load_module_only = true;
  DSCORE_RETURN_IF_ERROR(out.engine->load_checkpoint(dir, load).status());
  return out;
}

Result<InferenceModel> open_config_for_inference(const std::string& config_path,
                                                 const InferenceOptions& options) {
  DSCORE_ASSIGN_OR_RETURN(std::string text, checkpoint::read_text_file(config_path, 64u << 20));
  DSCORE_ASSIGN_OR_RETURN(json::Value config, json::parse(text, config_path));
  const json::Value* model = config.is_object() ? config.find("model") : nullptr;
  if (model == nullptr || !model->is_object())
    return invalid_argument(config_path + " has no \"model\" section");
  InferenceModel out;
  read_data_type(config, &out);
  const size_t slash = config_path.rfind('/');
  DSCORE_ASSIGN_OR_RETURN(
      out.engine,
      inference_engine(config, config_path,
                       slash == std::string::npos ? "." : config_path.substr(0, slash), options));
  DSCORE_RETURN_IF_ERROR(resolve_token_sizes(*model, config_path, &out));
  return out;
}

Result<InferenceModel> open_hf_for_inference(const std::string& folder,
                                             const InferenceOptions& options) {
  const std::string path = folder + "/config.json";
  DSCORE_ASSIGN_OR_RETURN(std::string text, checkpoint::read_text_file(path, 64u << 20));
  DSCORE_ASSIGN_OR_RETURN(json::Value hf, json::parse(text, path));
  const json::Value* type = hf.is_object() ? hf.find("model_type") : nullptr;
  if (type == nullptr || !type->is_string())
    return invalid_argument(path + " has no \"model_type\": not a transformers model folder");
  json::Value model = json::Value::object();
  model.set("type", json::Value(type->as_string() == "gpt2" ? "gpt2" : "llama"));
  model.set("from_pretrained", json::Value(folder));
  json::Value config = json::Value::object();
  config.set("train_batch_size", json::Value(1));
  config.set("model", std::move(model));
  InferenceModel out;
  read_data_type(config, &out);
  DSCORE_ASSIGN_OR_RETURN(out.engine, inference_engine(config, path, folder, options));
  DSCORE_RETURN_IF_ERROR(resolve_token_sizes(*config.find("model"), path, &out));
  return out;
}

Result<InferenceModel> open_inference(const InferenceSource& source,
                                      const InferenceOptions& options) {
  if (!source.checkpoint.empty()) return open_for_inference(source.checkpoint, source.tag, options);
  if (!source.config.empty()) return open_config_for_inference(source.config, options);
  return open_hf_for_inference(source.hf, options);
}

Result<TokenForward> TokenForward::create(Engine& engine, int64_t block_size, int64_t vocab_size) {
  const dscore_model_description& d = engine.model().description();
  if (d.input_count != 1 || d.inputs[0]->dtype != DSCORE_DTYPE_I32 || d.inputs[0]->ndim != 1 ||
      d.inputs[0]->shape[0] != block_size + 1)
    return invalid_argument(engine.model().display_name() +
                            " does not take block_size + 1 int32 tokens");
  return TokenForward(engine, block_size, vocab_size);
}

TokenForward::TokenForward(Engine& engine, int64_t block_size, int64_t vocab_size)
    : engine_(&engine),
      block_size_(block_size),
      window_(static_cast<size_t>(block_size + 1)),
      logits_(static_cast<size_t>(vocab_size)) {}

Status TokenForward::run(const std::vector<int32_t>& tokens, double* loss) {
  if (tokens.empty() || static_cast<int64_t>(tokens.size()) > block_size_)
    return invalid_argument("a forward pass takes 1 to block_size " + std::to_string(block_size_) +
                            " tokens, not " + std::to_string(tokens.size()));
  std::fill(window_.begin(), window_.end(), -1);  // -1 = padding
  std::copy(tokens.begin(), tokens.end(), window_.begin());
  const std::vector<int64_t> shape = {1, block_size_ + 1};
  const dscore_tensor input =
      tensor::host_view(window_.data(), DSCORE_DTYPE_I32, shape, block_size_ + 1);
  const dscore_tensor* inputs[] = {&input};
  const dscore_batch batch{sizeof(dscore_batch), 1, 1, inputs};
  const int64_t vocab = static_cast<int64_t>(logits_.size());
  dscore_tensor output = tensor::host_view(logits_.data(), DSCORE_DTYPE_F32, {1, vocab}, vocab);
  return engine_->forward(batch, &output, loss);
}

Status generate(Engine& engine, int64_t block_size, int64_t vocab_size,
                std::vector<int32_t>* tokens, int64_t max_new_tokens,
                const SamplingOptions& options, const std::function<bool(int32_t)>& on_token,
                bool use_cache, GenerationTiming* timing) {
  if (tokens->empty()) return invalid_argument("the prompt is empty: give at least one token");
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<BatchGenerator> generator,
                          BatchGenerator::create(engine, block_size, vocab_size, 1,
                                                 use_cache ? BatchGenerator::CacheMode::kAuto
                                                           : BatchGenerator::CacheMode::kOff));
  GenerationRequest request;
  request.prompt = *tokens;
  request.max_new_tokens = max_new_tokens;
  request.sampling = options;
  DSCORE_RETURN_IF_ERROR(generator->add(std::move(request)).status());
  GenerationTiming clock;
  clock.cached = generator->cached();
  clock.prompt_tokens = static_cast<int64_t>(tokens->size());
  bool stopped = false;
  for (int64_t step = 0; !generator->idle() && !stopped; ++step) {
    const auto start = std::chrono::steady_clock::now();
    DSCORE_ASSIGN_OR_RETURN(std::vector<GenerationEvent> events, generator->step());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (step == 0 ? clock.prefill_seconds : clock.decode_seconds) += seconds;
    for (const GenerationEvent& e : events) {
      if (e.token < 0) continue;
      if (step > 0) clock.decoded_tokens += 1;
      tokens->push_back(e.token);
      if (on_token && !on_token(e.token)) stopped = true;
    }
  }
  if (timing != nullptr) *timing = clock;
  return Status::Ok();
}

}  // namespace dscore
