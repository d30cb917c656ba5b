// The engine's view of a model: the model interface of
// sdk/include/dscore/model.h (layers, acquire/release/grads_ready hooks,
// init_param for any slice) as a C++ class. A model plugin is adapted to it
// by make_plugin_model(); a C++ program embedding the engine can subclass it
// directly. The C structs of model.h are the shared vocabulary.
#pragma once

#include <dscore/model.h>

#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::plugin_host {
class ModelInstance;
}

namespace dscore {

class Model {
 public:
  virtual ~Model() = default;

  // For messages: "model 'mlp' (/path/libdscore_mlp.so)" or the class's name.
  virtual std::string display_name() const = 0;

  // Stays valid and unchanged for the model's lifetime.
  virtual const dscore_model_description& description() const = 0;

  // Initial values of elements [offset, offset + count) of parameter
  // `param_index` (layer order) into `out` (fp32, count elements).
  virtual Status init_param(size_t param_index, int64_t offset, int64_t count,
                            float* out) const = 0;

  // Mean loss into *loss; ADDS d(loss_scale * loss)/d(param) into the
  // gradient views the hooks lend.
  virtual Status forward_backward(const dscore_batch& batch, const dscore_model_hooks& hooks,
                                  double loss_scale, double* loss) = 0;

  virtual Status forward(const dscore_batch& batch, const dscore_model_hooks& hooks, double* loss,
                         dscore_tensor* output);

  // Forward FLOPs of one layer for `batch_size` samples (multiply-adds count
  // 2), for the flops profiler; UNIMPLEMENTED when the model cannot say.
  virtual Result<double> layer_flops(size_t layer, int64_t batch_size) const;

  // Peak bytes of activations and backward scratch of one forward_backward
  // over `micro_batch` samples, without or with activation checkpointing,
  // for parameters lent in `param_dtype` and gradients in `grad_dtype`
  // (model.h activation_bytes_for, else activation_bytes); UNIMPLEMENTED
  // when the model cannot say.
  virtual Result<uint64_t> activation_bytes(int64_t micro_batch, bool checkpointing,
                                            dscore_dtype param_dtype,
                                            dscore_dtype grad_dtype) const;

  // Pipeline stages (model.h boundary_bytes, stage_forward, stage_backward):
  // UNIMPLEMENTED, naming the model, where it cannot be cut into stages.
  virtual bool has_pipeline_stages() const { return false; }
  virtual Result<uint64_t> boundary_bytes(size_t layer, int64_t micro_batch,
                                          dscore_dtype compute_dtype) const;
  virtual Status stage_forward(const dscore_pipeline_stage& stage, size_t slot,
                               const dscore_batch& batch, const dscore_model_hooks& hooks,
                               const void* input, void* output);
  virtual Status stage_backward(const dscore_pipeline_stage& stage, size_t slot,
                                const dscore_batch& batch, const dscore_model_hooks& hooks,
                                double loss_scale, const void* output_grad, void* input_grad,
                                double* loss);
  // A stage's activation memory (model.h stage_activation_bytes), for the
  // view dtypes as activation_bytes; UNIMPLEMENTED when the model cannot say.
  struct StageActivations {
    uint64_t slot_bytes = 0;    // one activation slot's
    uint64_t shared_bytes = 0;  // what the stage's slots share
  };
  virtual Result<StageActivations> stage_activation_bytes(const dscore_pipeline_stage& stage,
                                                          int64_t micro_batch, bool checkpointing,
                                                          dscore_dtype param_dtype,
                                                          dscore_dtype grad_dtype) const;

  // What the model's own tensor- and sequence-parallel collectives move per
  // micro-batch through `layers` (model.h collective_bytes); UNIMPLEMENTED
  // when the model cannot say.
  virtual Result<dscore_model_collectives> collective_bytes(const dscore_pipeline_stage& layers,
                                                            int64_t micro_batch,
                                                            bool checkpointing) const;

  // What the last forward_backward measured besides its loss (model.h
  // metrics: the MoE layers' aux loss, dropped routes, expert loads);
  // none by default.
  struct Metric {
    std::string name;  // a monitor tag under "Train/Samples/"
    double value = 0;
    bool mean = false;  // averaged over micro-batches and ranks (else summed)
  };
  virtual Status metrics(std::vector<Metric>* out) const {
    out->clear();
    return Status::Ok();
  }

  // KV-cached generation (model.h decode): a cache of `slots` sequences of
  // up to `max_positions` tokens for parameters lent in `param_dtype`,
  // destroyed with its handle (before the model); decode() runs one step
  // of new tokens on it (the logits at each sequence's last new token).
  // UNIMPLEMENTED where the model cannot: the caller runs forward() over
  // each whole sequence instead.
  class DecodeCache {
   public:
    virtual ~DecodeCache() = default;
  };
  virtual Result<std::unique_ptr<DecodeCache>> decode_cache(int64_t slots, int64_t max_positions,
                                                            dscore_dtype param_dtype);
  virtual Status decode(DecodeCache& cache, const dscore_decode_batch& batch,
                        const dscore_model_hooks& hooks, dscore_tensor* logits);
  // What such a cache takes (`dscore plan`); UNIMPLEMENTED as above.
  virtual Result<uint64_t> decode_cache_bytes(int64_t slots, int64_t max_positions,
                                              dscore_dtype param_dtype) const;

  // The model's own deterministic task (synthetic data), if it has one.
  virtual bool has_synthetic_task() const { return false; }
  virtual Status synthetic_batch(uint64_t seed, int64_t first_sample,
                                 const dscore_batch& out) const;
};

// The description's layer ties (model.h dscore_layer_tie), none where its
// struct_size does not reach them.
std::vector<dscore_layer_tie> layer_ties(const dscore_model_description& description);

std::unique_ptr<Model> make_plugin_model(std::unique_ptr<plugin_host::ModelInstance> instance);

}  // namespace dscore
