// How gradients are averaged across ranks (docs/deepspeed-reference.md#gradient-averaging), one
// rule for every stage so stages stay bitwise comparable:
//   default:                 AVG (sum in rank order, divided by W, rounded once)
//   prescale_gradients:      g /= W before, then SUM
//   gradient_predivide_factor f != 1: g /= f before, SUM, then g *= f / W
#pragma once

#include <dscore/comm.h>

#include "core/config/training_config.h"

namespace dscore::zero {

struct Reduction {
  double pre_factor = 1;
  dscore_reduce_op op = DSCORE_REDUCE_AVG;
  double post_factor = 1;
};

// Made once by the engine for the data-parallel group of `world` ranks
// (ZeroContext::reduction).
inline Reduction plan_reduction(const config::TrainingConfig& config, int world) {
  Reduction r;
  if (config.prescale_gradients) {
    r.pre_factor = 1.0 / world;
    r.op = DSCORE_REDUCE_SUM;
  } else if (config.gradient_predivide_factor != 1.0) {
    r.pre_factor = 1.0 / config.gradient_predivide_factor;
    r.op = DSCORE_REDUCE_SUM;
    r.post_factor = config.gradient_predivide_factor / world;
  }
  return r;
}

}  // namespace dscore::zero
