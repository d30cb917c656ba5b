// The flops profiler (DeepSpeed's "flops_profiler" section): during the
// step where global_steps == profile_step (as DeepSpeed counts), times each
// layer's forward pass (its FORWARD acquire to its release) and, at that
// step's boundary, prints (or writes to output_file) DeepSpeed's profile
// report with the FLOPs the model reports per layer (model.h layer_flops).
// A step observer; it reads the engine's global_steps through a pointer.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/config/training_config.h"
#include "core/engine/step_observer.h"
#include "core/model/model.h"
#include "core/zero/param_layout.h"

namespace dscore {

class FlopsProbe final : public StepObserver {
 public:
  // `global_steps` and `model` outlive the probe (the engine's).
  FlopsProbe(const config::TrainingConfig& config, const ParamLayout& layout, int world_size,
             int rank, const Model& model, const int64_t* global_steps);

  void on_acquired(size_t layer, dscore_acquire_mode mode) override {
    if (mode == DSCORE_ACQUIRE_FORWARD && profiling(*global_steps_)) forward_acquired(layer);
  }
  void on_release(size_t layer) override { released(layer); }
  // DeepSpeed profiles the step that starts at global_steps == profile_step.
  void on_boundary(const StepReport& report, std::vector<ScalarEvent>*) override;

  // Whether the micro-steps of the step numbered `global_steps` are timed.
  bool profiling(int64_t global_steps) const {
    return global_steps == config_.profile_step && !done_;
  }
  void forward_acquired(size_t layer);
  void released(size_t layer);
  // At the profiled step's boundary: the report (rank 0 prints or writes it).
  Result<std::string> report(const Model& model);
  void finish() { done_ = true; }
  const std::string& output_file() const { return config_.output_file; }

 private:
  using Clock = std::chrono::steady_clock;
  config::FlopsProfilerConfig config_;
  const ParamLayout& layout_;
  int world_size_;
  int rank_;
  const Model& model_;
  const int64_t* global_steps_;
  int64_t micro_batch_;
  int64_t micro_steps_;
  std::vector<double> forward_seconds_;     // per layer, summed over micro-steps
  std::vector<Clock::time_point> started_;  // per layer, while in forward
  std::vector<char> timing_;                // per layer: a FORWARD acquire is open
  bool done_ = false;
};

}  // namespace dscore
