// The training engine: DeepSpeed's "simplified training API" in C++.
//
//   auto engine = Engine::create(config, std::move(components));
//   for each micro-batch:  loss = engine->forward_backward(batch);  engine->step();
//
// step() is called after EVERY micro-batch, as in DeepSpeed: off the
// gradient-accumulation boundary it only counts; at the boundary it clips,
// updates (optimizer plugin over host-owned state), advances the LR schedule
// and writes monitor events with DeepSpeed's tags and x-axis.
//
// This version runs one rank, ZeRO stage 0, fp32: parameters, gradients and
// every optimizer state slot live in flat buffers sharing one layout
// (param_layout.h). Multi-rank ZeRO stages and 16-bit training build on it.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/base/memory.h"
#include "core/base/status.h"
#include "core/config/config.h"
#include "core/config/training_config.h"
#include "core/engine/lr_schedule.h"
#include "core/engine/monitor_hub.h"
#include "core/engine/param_layout.h"
#include "core/model/model.h"
#include "core/plugin_host/instances.h"

namespace dscore {

// What the engine runs, already created (see trainer.h for building these
// from a config and the plugin registry).
struct EngineComponents {
  std::unique_ptr<Model> model;
  std::unique_ptr<plugin_host::OptimizerInstance> optimizer;
  double base_lr = 0;  // the optimizer's configured lr
  std::unique_ptr<plugin_host::SchedulerInstance> scheduler;        // optional
  std::vector<std::unique_ptr<plugin_host::MonitorInstance>> monitors;  // rank 0 only
};

// Config settings this engine version cannot run yet, each with its JSON
// path and what to set instead. Engine::create refuses them; `dscore run`
// reports them as config errors before creating anything.
std::vector<config::ConfigError> unsupported_features(const config::TrainingConfig& config);

class Engine {
 public:
  // Checks that the config is one this engine runs (clear error otherwise),
  // builds the layout, allocates parameters, gradients and optimizer state,
  // and initialises parameters through the model's init_param.
  static Result<std::unique_ptr<Engine>> create(const config::TrainingConfig& config,
                                                EngineComponents components);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Forward and backward of one micro-batch; gradients accumulate until the
  // boundary. Returns the micro-batch's mean loss (unscaled).
  Result<double> forward_backward(const dscore_batch& batch);

  // See the file comment. Returns an error if a plugin failed.
  Status step();

  // True when the next step() call completes an accumulation cycle.
  bool is_gradient_accumulation_boundary() const;

  int64_t global_steps() const { return global_steps_; }
  int64_t global_samples() const { return global_samples_; }
  int64_t micro_steps() const { return micro_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  bool was_step_applied() const { return last_step_applied_; }
  // Learning rate of each parameter group for the next update.
  std::vector<double> get_lr() const;
  // Global gradient norm measured at the last boundary (before clipping).
  double get_global_grad_norm() const { return last_grad_norm_; }
  // Mean micro-batch loss of the last completed accumulation cycle.
  double last_loss() const { return last_loss_; }

  const ParamLayout& layout() const { return layout_; }
  const Model& model() const { return *model_; }
  // The fp32 parameters, flat in layout order (layout().total_numel()).
  const float* parameters() const { return static_cast<const float*>(params_.get()); }
  const float* gradients() const { return static_cast<const float*>(grads_.get()); }
  const config::TrainingConfig& config() const { return config_; }

 private:
  explicit Engine(const config::TrainingConfig& config) : config_(config) {}
  Status allocate_and_initialise();
  void build_views();
  Status apply_update(double grad_norm);
  double compute_grad_norm() const;
  std::vector<ScalarEvent> boundary_events(double loss, int64_t samples_before) const;

  // Model hooks (ctx = Engine*).
  static dscore_status hook_acquire(void* ctx, size_t layer, dscore_acquire_mode mode,
                                    dscore_layer_views* out);
  static dscore_status hook_release(void* ctx, size_t layer);
  static dscore_status hook_grads_ready(void* ctx, size_t layer);
  dscore_status fail_hook(dscore_status code, const std::string& message);

  config::TrainingConfig config_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<plugin_host::OptimizerInstance> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  MonitorHub monitors_;
  ParamLayout layout_;

  // Flat buffers, all in layout order:
  CountedBuffer params_;               // (total_numel) fp32
  CountedBuffer grads_;                // (total_numel) fp32
  std::vector<CountedBuffer> states_;  // per slot: (total_numel * elements_per_param) slot dtype

  // Tensor views handed to the model and the optimizer.
  std::vector<dscore_tensor> param_views_, grad_views_;
  std::vector<const dscore_tensor*> param_view_ptrs_;
  std::vector<dscore_tensor*> grad_view_ptrs_;
  std::vector<std::vector<dscore_tensor>> state_views_;  // [slot][param]
  std::vector<std::vector<int64_t>> state_shapes_;       // [slot * params + param]

  // Per-call hook bookkeeping.
  std::vector<int> acquired_;  // per layer: outstanding acquires
  std::string hook_error_;

  int64_t micro_steps_ = 0;
  int64_t global_steps_ = 0;
  int64_t global_samples_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t applied_steps_ = 0;
  bool last_step_applied_ = false;
  double loss_accumulator_ = 0;  // sum over the cycle's micro-batches of loss / gas
  double last_loss_ = 0;
  double last_grad_norm_ = 0;
};

}  // namespace dscore
