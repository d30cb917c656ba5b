// Adapts a model plugin instance (core/plugin_host) to the engine's Model
// interface. Every call goes through the instance, which guards the ABI.
#include "core/model/model.h"
#include "core/plugin_host/instances.h"

namespace dscore {
namespace {

// A plugin's KV cache, destroyed through its instance.
class PluginDecodeCache final : public Model::DecodeCache {
 public:
  PluginDecodeCache(plugin_host::ModelInstance& instance, dscore_decode_cache* handle)
      : instance_(instance), handle_(handle) {}
  ~PluginDecodeCache() override { instance_.decode_cache_destroy(handle_); }
  dscore_decode_cache* handle() const { return handle_; }

 private:
  plugin_host::ModelInstance& instance_;
  dscore_decode_cache* handle_;
};

class PluginModel final : public Model {
 public:
  explicit PluginModel(std::unique_ptr<plugin_host::ModelInstance> instance)
      : instance_(std::move(instance)) {}

  std::string display_name() const override { return instance_->info().display(); }
  const dscore_model_description& description() const override { return instance_->description(); }

  Status init_param(size_t param_index, int64_t offset, int64_t count, float* out) const override {
    const int64_t shape[1] = {count};
    dscore_tensor view{};
    view.struct_size = sizeof view;
    view.data = out;
    view.dtype = DSCORE_DTYPE_F32;
    view.device_type = DSCORE_DEVICE_CPU;
    view.ndim = 1;
    view.shape = shape;
    view.numel = count;
    return instance_->init_param(param_index, offset, count, &view);
  }

  Status forward_backward(const dscore_batch& batch, const dscore_model_hooks& hooks,
                          double loss_scale, double* loss) override {
    return instance_->forward_backward(batch, hooks, loss_scale, loss);
  }

  Status forward(const dscore_batch& batch, const dscore_model_hooks& hooks, double* loss,
                 dscore_tensor* output) override {
    return instance_->forward(batch, hooks, loss, output);
  }

  Result<double> layer_flops(size_t layer, int64_t batch_size) const override {
    return instance_->layer_flops(layer, batch_size);
  }

  Result<uint64_t> activation_bytes(int64_t micro_batch, bool checkpointing,
                                    dscore_dtype param_dtype,
                                    dscore_dtype grad_dtype) const override {
    return instance_->activation_bytes(micro_batch, checkpointing, param_dtype, grad_dtype);
  }

  bool has_pipeline_stages() const override { return instance_->has_pipeline_stages(); }
  Result<StageActivations> stage_activation_bytes(const dscore_pipeline_stage& stage,
                                                  int64_t micro_batch, bool checkpointing,
                                                  dscore_dtype param_dtype,
                                                  dscore_dtype grad_dtype) const override {
    StageActivations bytes;
    DSCORE_RETURN_IF_ERROR(
        instance_->stage_activation_bytes(stage, micro_batch, checkpointing, param_dtype,
                                          grad_dtype, &bytes.slot_bytes, &bytes.shared_bytes));
    return bytes;
  }
  Result<dscore_model_collectives> collective_bytes(const dscore_pipeline_stage& layers,
                                                    int64_t micro_batch,
                                                    bool checkpointing) const override {
    dscore_model_collectives out{};
    DSCORE_RETURN_IF_ERROR(instance_->collective_bytes(layers, micro_batch, checkpointing, &out));
    return out;
  }
  Status metrics(std::vector<Metric>* out) const override {
    std::vector<plugin_host::ModelInstance::Metric> values;
    DSCORE_RETURN_IF_ERROR(instance_->metrics(&values));
    out->clear();
    for (auto& m : values) out->push_back({std::move(m.name), m.value, m.mean});
    return Status::Ok();
  }
  Result<uint64_t> boundary_bytes(size_t layer, int64_t micro_batch,
                                  dscore_dtype compute_dtype) const override {
    return instance_->boundary_bytes(layer, micro_batch, compute_dtype);
  }
  Status stage_forward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch& batch,
                       const dscore_model_hooks& hooks, const void* input, void* output) override {
    return instance_->stage_forward(stage, slot, batch, hooks, input, output);
  }
  Status stage_backward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch& batch,
                        const dscore_model_hooks& hooks, double loss_scale, const void* output_grad,
                        void* input_grad, double* loss) override {
    return instance_->stage_backward(stage, slot, batch, hooks, loss_scale, output_grad, input_grad,
                                     loss);
  }

  Result<std::unique_ptr<DecodeCache>> decode_cache(int64_t slots, int64_t max_positions,
                                                    dscore_dtype param_dtype) override {
    DSCORE_ASSIGN_OR_RETURN(dscore_decode_cache * handle,
                            instance_->decode_cache_create(slots, max_positions, param_dtype));
    return std::unique_ptr<DecodeCache>(new PluginDecodeCache(*instance_, handle));
  }
  Status decode(DecodeCache& cache, const dscore_decode_batch& batch,
                const dscore_model_hooks& hooks, dscore_tensor* logits) override {
    return instance_->decode(static_cast<PluginDecodeCache&>(cache).handle(), batch, hooks, logits);
  }
  Result<uint64_t> decode_cache_bytes(int64_t slots, int64_t max_positions,
                                      dscore_dtype param_dtype) const override {
    return instance_->decode_cache_bytes(slots, max_positions, param_dtype);
  }

  bool has_synthetic_task() const override { return instance_->has_synthetic_task(); }
  Status synthetic_batch(uint64_t seed, int64_t first_sample,
                         const dscore_batch& out) const override {
    return instance_->synthetic_batch(seed, first_sample, out);
  }

 private:
  std::unique_ptr<plugin_host::ModelInstance> instance_;
};

}  // namespace

std::unique_ptr<Model> make_plugin_model(std::unique_ptr<plugin_host::ModelInstance> instance) {
  return std::make_unique<PluginModel>(std::move(instance));
}

}  // namespace dscore
