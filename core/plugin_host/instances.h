// Typed, owning handles to plugin instances. Each holds a reference to its
// library (so the code stays mapped until the instance is gone), calls the
// plugin only through guarded calls (call.h: status + host-side message, a
// C++ exception caught at the boundary, the plugin named in every error),
// and destroys the instance exactly once.
#pragma once

#include <dscore/comm.h>
#include <dscore/model.h>
#include <dscore/monitor.h>
#include <dscore/optimizer.h>
#include <dscore/scheduler.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/plugin_host/host_context.h"
#include "core/plugin_host/params.h"
#include "core/plugin_host/registry.h"

namespace dscore::plugin_host {

// Comm and offload instances: comm_instance.h.

// Identity of the process in the job, passed to every create(), and the
// host context the instance lives in (its engine's; nullptr gives the
// instance a context of its own).
struct InstanceContext {
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t local_rank = 0;
  uint64_t seed = 42;
  // Made only to describe itself (DSCORE_CREATE_DESCRIBE_ONLY): `dscore plan`.
  bool describe_only = false;
  std::shared_ptr<HostContext> host;
};

class OptimizerInstance {
 public:
  static Result<std::unique_ptr<OptimizerInstance>> create(const PluginInfo& info,
                                                           const ValidatedParams& params,
                                                           const InstanceContext& context);
  ~OptimizerInstance();
  const PluginInfo& info() const { return info_; }
  // Declared state slots (copied out of the plugin at creation).
  struct Slot {
    std::string name;
    dscore_dtype dtype;
    uint32_t elements_per_param;
    double initial_value;
  };
  const std::vector<Slot>& slots() const { return slots_; }
  Status step(const dscore_optimizer_step_args& args);
  // Opaque non-per-element state for checkpoints ("" and OK when the plugin
  // keeps none). Loading non-empty bytes into a plugin without
  // load_extra_state is FAILED_PRECONDITION.
  bool has_extra_state() const;
  Result<std::string> save_extra_state() const;
  Status load_extra_state(std::string_view bytes);
  // Whether the host reduces gradients before update `step` (true when the
  // plugin has no wants_reduced_gradients).
  Result<bool> wants_reduced_gradients(int64_t step) const;
  // Whole-parameter preconditioning (optimizer.h, ABI 1.2): whether the
  // plugin has it, whether `param` takes it, and one call.
  bool has_precondition() const;
  Result<bool> preconditions(const dscore_model_param& param) const;
  Status precondition(const dscore_optimizer_precondition_args& args);

 private:
  OptimizerInstance(PluginInfo info, dscore_optimizer* handle, std::shared_ptr<HostContext> host)
      : info_(std::move(info)), handle_(handle), host_(std::move(host)) {}
  PluginInfo info_;
  dscore_optimizer* handle_;
  std::shared_ptr<HostContext> host_;
  std::vector<Slot> slots_;
};

class SchedulerInstance {
 public:
  static Result<std::unique_ptr<SchedulerInstance>> create(const PluginInfo& info,
                                                           const ValidatedParams& params,
                                                           const InstanceContext& context,
                                                           const std::vector<double>& base_lrs,
                                                           int64_t total_steps);
  ~SchedulerInstance();
  const PluginInfo& info() const { return info_; }
  int64_t first_iteration() const;  // -1 when the plugin does not say
  // Checked: set_mask includes DSCORE_HPARAM_LR and every provided value is finite.
  Result<dscore_schedule_point> point_at(int64_t t, size_t group) const;
  bool has_extra_state() const;
  Result<std::string> save_extra_state() const;
  Status load_extra_state(std::string_view bytes);

 private:
  SchedulerInstance(PluginInfo info, dscore_scheduler* handle, std::shared_ptr<HostContext> host)
      : info_(std::move(info)), handle_(handle), host_(std::move(host)) {}
  PluginInfo info_;
  dscore_scheduler* handle_;
  std::shared_ptr<HostContext> host_;
};

class MonitorInstance {
 public:
  static Result<std::unique_ptr<MonitorInstance>> create(const PluginInfo& info,
                                                         const ValidatedParams& params,
                                                         const InstanceContext& context);
  ~MonitorInstance();
  const PluginInfo& info() const { return info_; }
  Status write_scalars(const std::vector<dscore_scalar_event>& events);
  Status flush();                                // OK when the plugin has no flush
  Status write_config(const std::string& json);  // OK when the plugin has no write_config

 private:
  MonitorInstance(PluginInfo info, dscore_monitor* handle, std::shared_ptr<HostContext> host)
      : info_(std::move(info)), handle_(handle), host_(std::move(host)) {}
  PluginInfo info_;
  dscore_monitor* handle_;
  std::shared_ptr<HostContext> host_;
};

class ModelInstance {
 public:
  static Result<std::unique_ptr<ModelInstance>> create(const PluginInfo& info,
                                                       const ValidatedParams& params,
                                                       const InstanceContext& context);
  ~ModelInstance();
  const PluginInfo& info() const { return info_; }
  // Checked at creation: layers/params/inputs well-formed, names unique.
  const dscore_model_description& description() const { return *description_; }
  Status init_param(size_t param_index, int64_t offset, int64_t count, dscore_tensor* out) const;
  Status forward_backward(const dscore_batch& batch, const dscore_model_hooks& hooks,
                          double loss_scale, double* loss);
  // UNIMPLEMENTED when the plugin has no forward / synthetic task.
  Status forward(const dscore_batch& batch, const dscore_model_hooks& hooks, double* loss,
                 dscore_tensor* output);
  bool has_synthetic_task() const;
  // UNIMPLEMENTED when the plugin has no layer_flops.
  Result<double> layer_flops(size_t layer, int64_t batch_size) const;
  // activation_bytes_for (ABI 1.2) where the plugin has it, else
  // activation_bytes (ABI 1.1), which cannot see the dtypes; UNIMPLEMENTED
  // when it has neither (or is older than ABI 1.1).
  Result<uint64_t> activation_bytes(int64_t micro_batch, bool checkpointing,
                                    dscore_dtype param_dtype, dscore_dtype grad_dtype) const;
  // Hugging Face export (ABI 1.2): UNIMPLEMENTED when the plugin has no
  // hf_tensor/hf_config (or is older). The name of parameter `param_index`
  // in a Hugging Face folder, and whether its 2-D transpose is stored.
  struct HfTensor {
    std::string name;
    bool transpose = false;
  };
  bool has_hf_export() const;
  Result<HfTensor> hf_tensor(size_t param_index) const;
  // config.json's text for weights of `dtype`.
  Result<std::string> hf_config(dscore_dtype dtype) const;
  Status synthetic_batch(uint64_t seed, int64_t first_sample, const dscore_batch& out) const;
  // Pipeline stages (ABI 1.2, model.h): UNIMPLEMENTED, naming the fix, when
  // the plugin lacks any of boundary_bytes, stage_forward, stage_backward.
  bool has_pipeline_stages() const;
  Result<uint64_t> boundary_bytes(size_t layer, int64_t micro_batch,
                                  dscore_dtype compute_dtype) const;
  Status stage_forward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch& batch,
                       const dscore_model_hooks& hooks, const void* input, void* output);
  Status stage_backward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch& batch,
                        const dscore_model_hooks& hooks, double loss_scale, const void* output_grad,
                        void* input_grad, double* loss);
  // A stage's activation memory (model.h stage_activation_bytes): one
  // slot's and what the slots share; UNIMPLEMENTED where the plugin does
  // not declare it.
  Status stage_activation_bytes(const dscore_pipeline_stage& stage, int64_t micro_batch,
                                bool checkpointing, dscore_dtype param_dtype,
                                dscore_dtype grad_dtype, uint64_t* slot_bytes,
                                uint64_t* shared_bytes) const;
  // What the model's own collectives move per micro-batch through the
  // layers (model.h collective_bytes); UNIMPLEMENTED where the plugin does
  // not declare it.
  Status collective_bytes(const dscore_pipeline_stage& layers, int64_t micro_batch,
                          bool checkpointing, dscore_model_collectives* out) const;
  // What the last pass measured besides its loss (model.h metrics): the
  // names copied; none where the plugin reports none.
  struct Metric {
    std::string name;
    double value = 0;
    bool mean = false;  // DSCORE_METRIC_MEAN (else summed)
  };
  Status metrics(std::vector<Metric>* out) const;
  // KV-cached generation (model.h decode_cache_create, decode_cache_destroy,
  // decode, decode_cache_bytes): UNIMPLEMENTED where the plugin lacks any
  // of the four. A cache is destroyed before the instance.
  bool has_decode() const;
  Result<dscore_decode_cache*> decode_cache_create(int64_t slots, int64_t max_positions,
                                                   dscore_dtype param_dtype);
  void decode_cache_destroy(dscore_decode_cache* cache);
  Status decode(dscore_decode_cache* cache, const dscore_decode_batch& batch,
                const dscore_model_hooks& hooks, dscore_tensor* logits);
  Result<uint64_t> decode_cache_bytes(int64_t slots, int64_t max_positions,
                                      dscore_dtype param_dtype) const;

 private:
  ModelInstance(PluginInfo info, dscore_model* handle, std::shared_ptr<HostContext> host)
      : info_(std::move(info)), handle_(handle), host_(std::move(host)) {}
  PluginInfo info_;
  dscore_model* handle_;
  std::shared_ptr<HostContext> host_;
  const dscore_model_description* description_ = nullptr;
};

}  // namespace dscore::plugin_host
