// Runs every stage's schedule against the others on a model clock: each
// stage executes its instructions in order, a receive waits for the
// matching send (and a send, in a rendezvous, for its receive), forward and
// backward slots cost given times and the rest nothing. It checks what the
// executor relies on (no deadlock, the messages between two stages arrive
// in the order and of the kind the receiver expects, as point-to-point
// calls match them, every micro-batch goes forward then
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
  // A factor on both per virtual stage (chunk * stages + stage: layers cut
  // unevenly); empty: 1 for every one.
  std::vector<double> virtual_stage_weight = {};
  double weight(int stage, int chunk, int stages) const {
    const size_t j = static_cast<size_t>(chunk * stages + stage);
    return j < virtual_stage_weight.size() ? virtual_stage_weight[j] : 1.0;
  }
};

struct Simulation {
  std::string error;         // empty when the schedules ran to the end
  double makespan = 0;       // when the last stage finished
  std::vector<double> busy;  // each stage's forward and backward time

  bool ok() const { return error.empty(); }
  // The share of the stages' time spent waiting: 1 - mean(busy) / makespan.
  double bubble() const;
};

// How a send completes. kBuffered: at once (an eager protocol, the
// loopback backend). kRendezvous: only once its receiver has received it
// (MPI's protocol for large messages, NCCL): the worst case, under which a
// schedule that runs runs with any backend.
enum class Delivery { kBuffered, kRendezvous };

// `schedules[s]` is stage s's schedule (train_schedule(shape, s) or another).
Simulation simulate(PipeShape shape, const std::vector<std::vector<Step>>& schedules,
                    SlotCosts costs = {}, Delivery delivery = Delivery::kBuffered);

}  // namespace dscore::pipeline
