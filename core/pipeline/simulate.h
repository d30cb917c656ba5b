// Runs every stage's schedule against the others on a model clock: each
// stage executes its instructions in order, a receive waits for the
// matching send, forward and backward slots cost given times and the rest
// nothing. It checks what the executor relies on (no deadlock, messages
// arrive in the order they are expected, every micro-batch goes forward then
// backward once per stage, no activation buffer is reused while its
// micro-batch is in flight) and measures the bubble that `dscore plan` and
// the bench compare against (stages - 1) / (micro_batches + stages - 1).
#pragma once

#include <string>
#include <vector>

#include "schedule.h"

namespace dscore::pipeline {

struct SlotCosts {
  double forward = 1.0;
  double backward = 1.0;
};

struct Simulation {
  std::string error;         // empty when the schedules ran to the end
  double makespan = 0;       // when the last stage finished
  std::vector<double> busy;  // each stage's forward and backward time

  bool ok() const { return error.empty(); }
  // The share of the stages' time spent waiting: 1 - mean(busy) / makespan.
  double bubble() const;
};

// `schedules[s]` is stage s's schedule (train_schedule(shape, s) or another).
Simulation simulate(PipeShape shape, const std::vector<std::vector<Step>>& schedules,
                    SlotCosts costs = {});

}  // namespace dscore::pipeline
