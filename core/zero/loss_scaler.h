// fp16 loss scaling, DeepSpeed's ZeRO variant (DynamicLossScaler,
// docs/deepspeed-reference.md#loss-scaler-update-rules), used at every stage: hysteresis, the
// scale doubles once `window` clean iterations have followed the first clean
// one after the last overflow (window + 1 in a row), and an overflow at the
// minimum scale is an error. (DeepSpeed's stage-0 FP16_Optimizer has no
// hysteresis and never fails at the minimum; dscore uses one rule at every
// stage so that stages stay equivalent: docs/deepspeed-differences.md.)
// A static scale (fp16.loss_scale > 0) never changes; bf16 and fp32 use 1.
#pragma once

#include <cstdint>

#include "core/base/status.h"
#include "core/config/training_config.h"

namespace dscore::zero {

class LossScaler {
 public:
  // From the resolved fp16 section; a disabled fp16 section gives the static
  // scale 1.
  static LossScaler from_config(const config::Fp16Config& fp16);
  static LossScaler dynamic(double initial_scale, int64_t window, double min_scale,
                            int64_t hysteresis, bool consecutive_hysteresis);
  static LossScaler fixed(double scale);

  double scale() const { return scale_; }
  bool is_dynamic() const { return dynamic_; }
  // One iteration's outcome. FAILED_PRECONDITION when an overflow happens at
  // the minimum scale (DeepSpeed raises "Current loss scale already at
  // minimum - cannot decrease scale anymore. Exiting run.").
  Status update(bool overflow);

  // What changes as training runs: checkpoints save and restore it (the
  // settings come from the config).
  struct State {
    double scale = 1;
    int64_t iteration = 0;
    int64_t last_overflow = -1;
    int64_t hysteresis_left = 1;
  };
  State state() const { return {scale_, iteration_, last_overflow_, hysteresis_left_}; }
  void restore(const State& s) {
    scale_ = s.scale;
    iteration_ = s.iteration;
    last_overflow_ = s.last_overflow;
    hysteresis_left_ = s.hysteresis_left;
  }

  // For tests.
  int64_t iteration() const { return iteration_; }
  int64_t last_overflow_iteration() const { return last_overflow_; }
  int64_t hysteresis_left() const { return hysteresis_left_; }

 private:
  bool dynamic_ = false;
  double scale_ = 1;
  int64_t window_ = 1000;
  double min_scale_ = 1;
  int64_t delayed_shift_ = 1;  // the configured hysteresis
  bool consecutive_ = false;
  int64_t hysteresis_left_ = 1;
  int64_t iteration_ = 0;
  int64_t last_overflow_ = -1;
};

}  // namespace dscore::zero
