// Model instances (instances.h): creation checks the model's description
// thoroughly, because the engine plans partitions, buffers and batches from
// it; an inconsistent description is reported here, naming the layer and
// parameter, instead of surfacing as a wrong shape deep inside a step.
#include <dscore/cpp/dtype.hpp>

#include <set>

#include "core/plugin_host/call.h"
#include "core/plugin_host/instance_common.h"

namespace dscore::plugin_host {
namespace {

using detail::vtable_of;

// Dimensions are positive and multiply to numel, without overflow.
bool shape_matches(int32_t ndim, const int64_t* shape, int64_t numel, std::string* why) {
  if (ndim < 0 || ndim > 16) {
    *why = "ndim " + std::to_string(ndim) + " is out of range [0, 16]";
    return false;
  }
  if (ndim > 0 && shape == nullptr) {
    *why = "ndim is " + std::to_string(ndim) + " but shape is NULL";
    return false;
  }
  int64_t product = 1;
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] <= 0) {
      *why = "dimension " + std::to_string(d) + " is " + std::to_string(shape[d]) +
             " (dimensions must be >= 1)";
      return false;
    }
    if (__builtin_mul_overflow(product, shape[d], &product)) {
      *why = "the shape's element count overflows int64";
      return false;
    }
  }
  if (numel >= 0 && product != numel) {
    *why = "numel is " + std::to_string(numel) + " but the shape holds " + std::to_string(product);
    return false;
  }
  return true;
}

Status check_description(const std::string& who, const dscore_model_description* d) {
  auto bad = [&](const std::string& what) {
    return Status(DSCORE_INTERNAL, who + " describe: " + what + " (a bug in the model plugin)");
  };
  if (d == nullptr) return bad("returned OK but no description (NULL)");
  if (!DSCORE_HAS_FIELD(d, dscore_model_description, hidden_size))
    return bad("dscore_model_description.struct_size " + std::to_string(d->struct_size) +
               " is smaller than ABI 1.0's");
  if (d->layer_count == 0) return bad("the model has no layers (layer_count is 0)");
  if (d->layers == nullptr)
    return bad("layer_count is " + std::to_string(d->layer_count) + " but layers is NULL");
  if (d->hidden_size < 0) return bad("hidden_size is negative");
  std::set<std::string> param_names;
  size_t total_params = 0;
  for (size_t l = 0; l < d->layer_count; ++l) {
    const dscore_model_layer* layer = d->layers[l];
    std::string at = "layer " + std::to_string(l);
    if (layer == nullptr) return bad(at + " is NULL");
    if (!DSCORE_HAS_FIELD(layer, dscore_model_layer, params))
      return bad(at + " has struct_size " + std::to_string(layer->struct_size) +
                 ", smaller than ABI 1.0's dscore_model_layer");
    if (layer->name != nullptr) at += " ('" + std::string(layer->name) + "')";
    if (layer->param_count > 0 && layer->params == nullptr)
      return bad(at + " has param_count " + std::to_string(layer->param_count) +
                 " but params is NULL");
    for (size_t p = 0; p < layer->param_count; ++p) {
      const dscore_model_param* param = layer->params[p];
      std::string pat = at + " param " + std::to_string(p);
      if (param == nullptr) return bad(pat + " is NULL");
      if (!DSCORE_HAS_FIELD(param, dscore_model_param, flags))
        return bad(pat + " has struct_size " + std::to_string(param->struct_size) +
                   ", smaller than ABI 1.0's dscore_model_param");
      if (param->name == nullptr || param->name[0] == '\0') return bad(pat + " has no name");
      pat = at + " param '" + std::string(param->name) + "'";
      if (!param_names.insert(param->name).second)
        return bad(pat + ": the parameter name '" + param->name +
                   "' is used twice (names must be unique in the model: they key checkpoints)");
      std::string why;
      if (param->numel < 1) return bad(pat + ": numel is " + std::to_string(param->numel));
      if (!shape_matches(param->ndim, param->shape, param->numel, &why))
        return bad(pat + ": " + why);
      ++total_params;
    }
  }
  if (total_params == 0) return bad("no layer has parameters; there is nothing to train");
  if (d->input_count == 0) return bad("the model declares no inputs (input_count is 0)");
  if (d->inputs == nullptr)
    return bad("input_count is " + std::to_string(d->input_count) + " but inputs is NULL");
  std::set<std::string> input_names;
  for (size_t i = 0; i < d->input_count; ++i) {
    const dscore_model_input* input = d->inputs[i];
    std::string at = "input " + std::to_string(i);
    if (input == nullptr) return bad(at + " is NULL");
    if (!DSCORE_HAS_FIELD(input, dscore_model_input, shape))
      return bad(at + " has struct_size " + std::to_string(input->struct_size) +
                 ", smaller than ABI 1.0's dscore_model_input");
    if (input->name == nullptr || input->name[0] == '\0') return bad(at + " has no name");
    at += " ('" + std::string(input->name) + "')";
    if (!input_names.insert(input->name).second) return bad(at + ": the name is used twice");
    if (sdk::dtype_size(input->dtype) == 0)
      return bad(at + " has unsupported dtype " + std::to_string(input->dtype));
    std::string why;
    if (!shape_matches(input->ndim, input->shape, -1, &why)) return bad(at + ": " + why);
  }
  if (DSCORE_HAS_FIELD(d, dscore_model_description, ties) && d->tie_count > 0) {
    if (d->ties == nullptr)
      return bad("tie_count is " + std::to_string(d->tie_count) + " but ties is NULL");
    for (size_t t = 0; t < d->tie_count; ++t) {
      const dscore_layer_tie* tie = d->ties[t];
      const std::string at = "tie " + std::to_string(t);
      if (tie == nullptr) return bad(at + " is NULL");
      if (!DSCORE_HAS_FIELD(tie, dscore_layer_tie, reader))
        return bad(at + " has struct_size " + std::to_string(tie->struct_size) +
                   ", smaller than ABI 1.2's dscore_layer_tie");
      if (tie->owner >= d->layer_count || tie->reader >= d->layer_count ||
          tie->owner == tie->reader)
        return bad(at + " ties layer " + std::to_string(tie->owner) + " to layer " +
                   std::to_string(tie->reader) + ": both must be layers of the model's " +
                   std::to_string(d->layer_count) + ", and different");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ModelInstance>> ModelInstance::create(const PluginInfo& info,
                                                             const ValidatedParams& params,
                                                             const InstanceContext& context) {
  DSCORE_RETURN_IF_ERROR(detail::prepare_create(info, DSCORE_KIND_MODEL));
  const auto* vt = vtable_of<dscore_model_vtable>(info);
  const std::string who = info.display();
  std::shared_ptr<HostContext> host = detail::host_of(context);
  dscore_create_args args = detail::make_create_args(params, context, *host);
  dscore_model* handle = nullptr;
  DSCORE_RETURN_IF_ERROR(
      call_plugin(*host, who, "create", [&] { return vt->create(&args, &handle); }));
  if (handle == nullptr) return detail::null_handle_error(info);
  std::unique_ptr<ModelInstance> instance(new ModelInstance(info, handle, host));

  const dscore_model_description* description = nullptr;
  DSCORE_RETURN_IF_ERROR(
      call_plugin(*host, who, "describe", [&] { return vt->describe(handle, &description); }));
  DSCORE_RETURN_IF_ERROR(check_description(who, description));
  instance->description_ = description;
  return instance;
}

ModelInstance::~ModelInstance() {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  call_plugin_void(*host_, info_.display(), "destroy", [&] { vt->destroy(handle_); });
}

Status ModelInstance::init_param(size_t param_index, int64_t offset, int64_t count,
                                 dscore_tensor* out) const {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  return call_plugin(*host_, info_.display(), "init_param",
                     [&] { return vt->init_param(handle_, param_index, offset, count, out); });
}

Status ModelInstance::forward_backward(const dscore_batch& batch, const dscore_model_hooks& hooks,
                                       double loss_scale, double* loss) {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  return call_plugin(*host_, info_.display(), "forward_backward", [&] {
    return vt->forward_backward(handle_, &batch, &hooks, loss_scale, loss);
  });
}

Status ModelInstance::forward(const dscore_batch& batch, const dscore_model_hooks& hooks,
                              double* loss, dscore_tensor* output) {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_model_vtable, forward) || vt->forward == nullptr)
    return Status(DSCORE_UNIMPLEMENTED,
                  info_.display() +
                      " has no forward-only pass (forward is NULL); evaluation "
                      "and generation need a model that provides it");
  return call_plugin(*host_, info_.display(), "forward",
                     [&] { return vt->forward(handle_, &batch, &hooks, loss, output); });
}

Result<double> ModelInstance::layer_flops(size_t layer, int64_t batch_size) const {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_model_vtable, layer_flops) || vt->layer_flops == nullptr)
    return Status(DSCORE_UNIMPLEMENTED,
                  info_.display() + " does not report its FLOPs (layer_flops is NULL)");
  double flops = 0;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "layer_flops", [&] {
    return vt->layer_flops(handle_, layer, batch_size, &flops);
  }));
  return flops;
}

Result<uint64_t> ModelInstance::activation_bytes(int64_t micro_batch, bool checkpointing,
                                                 dscore_dtype param_dtype,
                                                 dscore_dtype grad_dtype) const {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  uint64_t bytes = 0;
  if (DSCORE_HAS_FIELD(vt, dscore_model_vtable, activation_bytes_for) &&
      vt->activation_bytes_for != nullptr) {
    DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "activation_bytes_for", [&] {
      return vt->activation_bytes_for(handle_, micro_batch, checkpointing ? 1 : 0, param_dtype,
                                      grad_dtype, &bytes);
    }));
    return bytes;
  }
  if (!DSCORE_HAS_FIELD(vt, dscore_model_vtable, activation_bytes) ||
      vt->activation_bytes == nullptr)
    return Status(DSCORE_UNIMPLEMENTED, info_.display() +
                                            " does not declare its activation memory "
                                            "(activation_bytes is NULL)");
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "activation_bytes", [&] {
    return vt->activation_bytes(handle_, micro_batch, checkpointing ? 1 : 0, &bytes);
  }));
  return bytes;
}

namespace {
Status no_hf_export(const PluginInfo& info) {
  return Status(DSCORE_UNIMPLEMENTED,
                info.display() + " has no Hugging Face form (hf_tensor/hf_config are NULL)");
}
}  // namespace

bool ModelInstance::has_hf_export() const {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  return DSCORE_HAS_FIELD(vt, dscore_model_vtable, hf_config) && vt->hf_tensor != nullptr &&
         vt->hf_config != nullptr;
}

Result<ModelInstance::HfTensor> ModelInstance::hf_tensor(size_t param_index) const {
  if (!has_hf_export()) return no_hf_export(info_);
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  dscore_hf_tensor out{};
  out.struct_size = sizeof out;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "hf_tensor",
                                     [&] { return vt->hf_tensor(handle_, param_index, &out); }));
  if (out.name == nullptr || out.name[0] == '\0')
    return internal_error(info_.display() + ": hf_tensor gave parameter " +
                          std::to_string(param_index) + " no name");
  return HfTensor{out.name, out.transpose != 0};
}

Result<std::string> ModelInstance::hf_config(dscore_dtype dtype) const {
  if (!has_hf_export()) return no_hf_export(info_);
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  std::string text(4096, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    size_t length = 0;
    DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "hf_config", [&] {
      return vt->hf_config(handle_, dtype, text.data(), text.size(), &length);
    }));
    if (length < text.size()) {
      text.resize(length);
      return text;
    }
    text.assign(length + 1, '\0');
  }
  return internal_error(info_.display() + ": hf_config's length changed between calls");
}

bool ModelInstance::has_synthetic_task() const {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  return DSCORE_HAS_FIELD(vt, dscore_model_vtable, synthetic_batch) &&
         vt->synthetic_batch != nullptr;
}

Status ModelInstance::synthetic_batch(uint64_t seed, int64_t first_sample,
                                      const dscore_batch& out) const {
  if (!has_synthetic_task())
    return Status(DSCORE_UNIMPLEMENTED,
                  info_.display() +
                      " has no synthetic task (synthetic_batch is NULL); give the "
                      "run a data file in the \"data\" section");
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  return call_plugin(*host_, info_.display(), "synthetic_batch",
                     [&] { return vt->synthetic_batch(handle_, seed, first_sample, &out); });
}

}  // namespace dscore::plugin_host

namespace dscore::plugin_host {

bool ModelInstance::has_pipeline_stages() const {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  return DSCORE_HAS_FIELD(vt, dscore_model_vtable, stage_backward) &&
         vt->boundary_bytes != nullptr && vt->stage_forward != nullptr &&
         vt->stage_backward != nullptr;
}

namespace {
Status no_pipeline_stages(const PluginInfo& info) {
  return Status(DSCORE_UNIMPLEMENTED,
                info.display() +
                    " cannot be cut into pipeline stages (boundary_bytes, stage_forward and "
                    "stage_backward are NULL): train it without \"pipeline\", or with a model "
                    "that has them (mlp, gpt, llama)");
}
}  // namespace

Result<uint64_t> ModelInstance::boundary_bytes(size_t layer, int64_t micro_batch,
                                               dscore_dtype compute_dtype) const {
  if (!has_pipeline_stages()) return no_pipeline_stages(info_);
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  uint64_t bytes = 0;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "boundary_bytes", [&] {
    return vt->boundary_bytes(handle_, layer, micro_batch, compute_dtype, &bytes);
  }));
  return bytes;
}

Status ModelInstance::stage_activation_bytes(const dscore_pipeline_stage& stage,
                                             int64_t micro_batch, bool checkpointing,
                                             dscore_dtype param_dtype, dscore_dtype grad_dtype,
                                             uint64_t* slot_bytes, uint64_t* shared_bytes) const {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  if (!has_pipeline_stages() ||
      !DSCORE_HAS_FIELD(vt, dscore_model_vtable, stage_activation_bytes) ||
      vt->stage_activation_bytes == nullptr)
    return Status(DSCORE_UNIMPLEMENTED, info_.display() +
                                            " does not declare a pipeline stage's activation "
                                            "memory (stage_activation_bytes is NULL)");
  return call_plugin(*host_, info_.display(), "stage_activation_bytes", [&] {
    return vt->stage_activation_bytes(handle_, &stage, micro_batch, checkpointing ? 1 : 0,
                                      param_dtype, grad_dtype, slot_bytes, shared_bytes);
  });
}

Status ModelInstance::collective_bytes(const dscore_pipeline_stage& layers, int64_t micro_batch,
                                       bool checkpointing, dscore_model_collectives* out) const {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_model_vtable, collective_bytes) ||
      vt->collective_bytes == nullptr)
    return Status(DSCORE_UNIMPLEMENTED, info_.display() +
                                            " does not declare what its collectives move "
                                            "(collective_bytes is NULL)");
  *out = dscore_model_collectives{};
  out->struct_size = sizeof *out;
  return call_plugin(*host_, info_.display(), "collective_bytes", [&] {
    return vt->collective_bytes(handle_, &layers, micro_batch, checkpointing ? 1 : 0, out);
  });
}

Status ModelInstance::metrics(std::vector<Metric>* out) const {
  out->clear();
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  if (!DSCORE_HAS_FIELD(vt, dscore_model_vtable, metrics) || vt->metrics == nullptr)
    return Status::Ok();
  std::vector<dscore_model_metric> values(16);
  size_t count = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (dscore_model_metric& m : values) {
      m = dscore_model_metric{};
      m.struct_size = sizeof m;
    }
    DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "metrics", [&] {
      return vt->metrics(handle_, values.data(), values.size(), &count);
    }));
    if (count <= values.size()) break;
    values.resize(count);
  }
  for (size_t i = 0; i < std::min(count, values.size()); ++i) {
    const dscore_model_metric& m = values[i];
    if (m.name == nullptr || m.name[0] == '\0')
      return Status(DSCORE_INTERNAL, info_.display() + "'s metric " + std::to_string(i) +
                                         " has no name (model.h metrics)");
    out->push_back({m.name, m.value, m.combine == DSCORE_METRIC_MEAN});
  }
  return Status::Ok();
}

Status ModelInstance::stage_forward(const dscore_pipeline_stage& stage, size_t slot,
                                    const dscore_batch& batch, const dscore_model_hooks& hooks,
                                    const void* input, void* output) {
  if (!has_pipeline_stages()) return no_pipeline_stages(info_);
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  return call_plugin(*host_, info_.display(), "stage_forward", [&] {
    return vt->stage_forward(handle_, &stage, slot, &batch, &hooks, input, output);
  });
}

Status ModelInstance::stage_backward(const dscore_pipeline_stage& stage, size_t slot,
                                     const dscore_batch& batch, const dscore_model_hooks& hooks,
                                     double loss_scale, const void* output_grad, void* input_grad,
                                     double* loss) {
  if (!has_pipeline_stages()) return no_pipeline_stages(info_);
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  return call_plugin(*host_, info_.display(), "stage_backward", [&] {
    return vt->stage_backward(handle_, &stage, slot, &batch, &hooks, loss_scale, output_grad,
                              input_grad, loss);
  });
}

bool ModelInstance::has_decode() const {
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  return DSCORE_HAS_FIELD(vt, dscore_model_vtable, decode_cache_bytes) &&
         vt->decode_cache_create != nullptr && vt->decode_cache_destroy != nullptr &&
         vt->decode != nullptr && vt->decode_cache_bytes != nullptr;
}

namespace {
Status no_decode(const PluginInfo& info) {
  return Status(DSCORE_UNIMPLEMENTED,
                info.display() +
                    " has no KV-cached generation (decode_cache_create, decode_cache_destroy, "
                    "decode and decode_cache_bytes, ABI 1.2)");
}
}  // namespace

Result<dscore_decode_cache*> ModelInstance::decode_cache_create(int64_t slots,
                                                                int64_t max_positions,
                                                                dscore_dtype param_dtype) {
  if (!has_decode()) return no_decode(info_);
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  dscore_decode_cache* cache = nullptr;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "decode_cache_create", [&] {
    return vt->decode_cache_create(handle_, slots, max_positions, param_dtype, &cache);
  }));
  if (cache == nullptr)
    return Status(DSCORE_INTERNAL,
                  info_.display() + "'s decode_cache_create returned OK without a cache");
  return cache;
}

void ModelInstance::decode_cache_destroy(dscore_decode_cache* cache) {
  if (cache == nullptr || !has_decode()) return;
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  call_plugin_void(*host_, info_.display(), "decode_cache_destroy",
                   [&] { vt->decode_cache_destroy(handle_, cache); });
}

Status ModelInstance::decode(dscore_decode_cache* cache, const dscore_decode_batch& batch,
                             const dscore_model_hooks& hooks, dscore_tensor* logits) {
  if (!has_decode()) return no_decode(info_);
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  return call_plugin(*host_, info_.display(), "decode",
                     [&] { return vt->decode(handle_, cache, &batch, &hooks, logits); });
}

Result<uint64_t> ModelInstance::decode_cache_bytes(int64_t slots, int64_t max_positions,
                                                   dscore_dtype param_dtype) const {
  if (!has_decode()) return no_decode(info_);
  const auto* vt = vtable_of<dscore_model_vtable>(info_);
  uint64_t bytes = 0;
  DSCORE_RETURN_IF_ERROR(call_plugin(*host_, info_.display(), "decode_cache_bytes", [&] {
    return vt->decode_cache_bytes(handle_, slots, max_positions, param_dtype, &bytes);
  }));
  return bytes;
}

}  // namespace dscore::plugin_host
