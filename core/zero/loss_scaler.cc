#include "core/zero/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace dscore::zero {

LossScaler LossScaler::from_config(const config::Fp16Config& fp16) {
  if (!fp16.enabled) return fixed(1.0);
  if (fp16.loss_scale > 0) return fixed(fp16.loss_scale);
  if (!fp16.dynamic_args_given)
    // None of the five dynamic keys given: DynamicLossScaler()'s own defaults, 2^32, window 1000,
    // min 1, hysteresis 1 (docs/deepspeed-reference.md#loss-scaler-defaults).
    return dynamic(std::ldexp(1.0, 32), 1000, 1.0, 1, false);
  return dynamic(std::ldexp(1.0, static_cast<int>(fp16.initial_scale_power)),
                 fp16.loss_scale_window, fp16.min_loss_scale, fp16.hysteresis,
                 fp16.consecutive_hysteresis);
}

LossScaler LossScaler::dynamic(double initial_scale, int64_t window, double min_scale,
                               int64_t hysteresis, bool consecutive_hysteresis) {
  LossScaler s;
  s.dynamic_ = true;
  s.scale_ = initial_scale;
  s.window_ = std::max<int64_t>(1, window);
  s.min_scale_ = min_scale;
  s.delayed_shift_ = std::max<int64_t>(1, hysteresis);
  s.hysteresis_left_ = s.delayed_shift_;
  s.consecutive_ = consecutive_hysteresis;
  return s;
}

LossScaler LossScaler::fixed(double scale) {
  LossScaler s;
  s.scale_ = scale;
  return s;
}

Status LossScaler::update(bool overflow) {
  if (!dynamic_) {
    iteration_ += 1;
    return Status::Ok();
  }
  if (overflow) {
    if (delayed_shift_ == 1 || hysteresis_left_ == 1) {
      if (scale_ == min_scale_)
        return failed_precondition(
            "fp16 gradient overflow with the loss scale already at its minimum (" +
            std::to_string(min_scale_) +
            "): cannot decrease the scale any further. Lower the learning rate, check the data, "
            "or lower fp16.min_loss_scale");
      scale_ = std::max(scale_ / 2, min_scale_);
    } else {
      hysteresis_left_ -= 1;
    }
    last_overflow_ = iteration_;
  } else {
    if (consecutive_) hysteresis_left_ = delayed_shift_;
    if ((iteration_ - last_overflow_) % window_ == 0) {
      scale_ *= 2;
      if (!consecutive_) hysteresis_left_ = delayed_shift_;
    }
  }
  iteration_ += 1;
  return Status::Ok();
}

}  // namespace dscore::zero
