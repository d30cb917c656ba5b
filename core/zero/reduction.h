// How gradients are averaged across ranks (docs/deepspeed-reference.md#gradient-averaging), one
// rule for every stage so stages stay bitwise comparable:
//   default:                 AVG (sum in rank order, divided by W, rounded once)
//   prescale_gradients:      g /= W before, then SUM
//   gradient_predivide_factor f != 1: g /= f before, SUM, then g *= f / W
//   (W: the replicas; with sequence parallelism, not every rank is one:
//   SUM, then g *= 1 / W)
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
// (ZeroContext::reduction). `replicas` (world unless given) is how many of
// them compute gradients of different samples: under Ulysses sequence
// parallelism each rank's gradients are its share of its group's whole
// sequence, summed over the sequence group and averaged over the replicas
// (DeepSpeed: the seq_data_parallel_group's sum over world / sp).
inline Reduction plan_reduction(const config::TrainingConfig& config, int world, int replicas = 0) {
  if (replicas <= 0) replicas = world;
  Reduction r;
  if (config.prescale_gradients) {
    r.pre_factor = 1.0 / replicas;
    r.op = DSCORE_REDUCE_SUM;
  } else if (config.gradient_predivide_factor != 1.0) {
    r.pre_factor = 1.0 / config.gradient_predivide_factor;
    r.op = DSCORE_REDUCE_SUM;
    r.post_factor = config.gradient_predivide_factor / replicas;
  } else if (replicas != world) {
    r.op = DSCORE_REDUCE_SUM;
    r.post_factor = 1.0 / replicas;
  }
  return r;
}

}  // namespace dscore::zero
