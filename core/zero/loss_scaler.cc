#include "core/zero/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace dscore::zero {
namespace {

std::string format_scale(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

}  // namespace

LossScaler LossScaler::from_config(const config::Fp16Config& fp16) {
  if (!fp16.enabled) return fixed(1.0);
  if (fp16.loss_scale > 0) return fixed(fp16.loss_scale);
  // DeepSpeed (0.17 on) hands the fp16 section's values, defaults included, to every scaler:
  // no separate 2^32 / hysteresis-1 defaults (docs/deepspeed-reference.md#loss-scaler-defaults).
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
            format_scale(min_scale_) +
            ", fp16.min_loss_scale): cannot decrease the scale any further. Lower the learning "
            "rate or check the data");
      scale_ = std::max(scale_ / 2, min_scale_);
    } else {
      hysteresis_left_ -= 1;
    }
    last_overflow_ = iteration_;
  } else {
    if (consecutive_) hysteresis_left_ = delayed_shift_;
    // Clean iterations since the last overflow, not counting the first: the
    // first doubling needs window + 1 clean iterations in a row (fresh start:
    // iteration `window`), later ones come every `window` iterations.
    const int64_t stable_interval = iteration_ - last_overflow_ - 1;
    if (stable_interval > 0 && stable_interval % window_ == 0) {
      scale_ *= 2;
      if (!consecutive_) hysteresis_left_ = delayed_shift_;
    }
  }
  iteration_ += 1;
  return Status::Ok();
}

}  // namespace dscore::zero
