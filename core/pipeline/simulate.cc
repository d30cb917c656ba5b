#include "simulate.h"

#include <algorithm>
#include <deque>
#include <numeric>

namespace dscore::pipeline {
namespace {

struct Message {
  int micro_batch;
  double time;
};

// One stage's progress through its flattened instructions.
struct StageRun {
  std::vector<Instruction> program;
  size_t next = 0;
  double clock = 0;
  std::vector<int> buffer_holds;  // unit per buffer, -1 free
  // Per unit (chunk * micro_batches + micro_batch):
  std::vector<int> forwarded;        // forwards run
  std::vector<int> backwarded;       // backwards run
  std::vector<int> has_input;        // activation received or loaded
  std::vector<int> has_output_grad;  // gradient received
};

std::string where(int stage, const Instruction& ins) {
  return "stage " + std::to_string(stage) + " at " + ins.to_string() + " (micro-batch " +
         std::to_string(ins.micro_batch) + ")";
}

// A channel into a stage's chunk: index chunk * stages + stage.
struct Place {
  int stage;
  int chunk;
};

}  // namespace

double Simulation::bubble() const {
  if (busy.empty() || makespan <= 0) return 0;
  const double mean = std::accumulate(busy.begin(), busy.end(), 0.0) / busy.size();
  return 1.0 - mean / makespan;
}

Simulation simulate(PipeShape shape, const std::vector<std::vector<Step>>& schedules,
                    SlotCosts costs) {
  Simulation out;
  const int p = shape.stages, m = shape.micro_batches, v = shape.virtual_stages;
  if (static_cast<int>(schedules.size()) != p) {
    out.error = "expected one schedule per stage";
    return out;
  }
  std::vector<StageRun> runs(static_cast<size_t>(p));
  // Channels, by receiving stage and chunk: activations from the virtual
  // stage before, gradients from the one after.
  std::vector<std::deque<Message>> activations(static_cast<size_t>(p * v)),
      grads(static_cast<size_t>(p * v));
  const auto channel = [&](std::vector<std::deque<Message>> & of, Place place) -> auto& {
    return of[static_cast<size_t>(place.chunk * p + place.stage)];
  };
  for (int s = 0; s < p; ++s) {
    StageRun& run = runs[static_cast<size_t>(s)];
    for (const Step& step : schedules[static_cast<size_t>(s)])
      run.program.insert(run.program.end(), step.begin(), step.end());
    run.buffer_holds.assign(static_cast<size_t>(pipe_buffers(shape, s)), -1);
    for (auto* per_unit : {&run.forwarded, &run.backwarded, &run.has_input, &run.has_output_grad})
      per_unit->assign(static_cast<size_t>(m * v), 0);
  }
  out.busy.assign(static_cast<size_t>(p), 0.0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < p && out.error.empty(); ++s) {
      StageRun& run = runs[static_cast<size_t>(s)];
      while (run.next < run.program.size() && out.error.empty()) {
        const Instruction& ins = run.program[run.next];
        if (ins.micro_batch >= m || ins.chunk < 0 || ins.chunk >= v) {
          out.error = where(s, ins) + ": there are " + std::to_string(m) + " micro-batches and " +
                      std::to_string(v) + " chunks";
          break;
        }
        const size_t mb = static_cast<size_t>(ins.chunk * m + std::max(ins.micro_batch, 0));
        const bool first_virtual = s == 0 && ins.chunk == 0;
        const bool last_virtual = s == p - 1 && ins.chunk == v - 1;
        const auto take_buffer = [&] {
          if (ins.buffer < 0 || ins.buffer >= static_cast<int>(run.buffer_holds.size())) {
            out.error = where(s, ins) + ": the stage has " +
                        std::to_string(run.buffer_holds.size()) + " buffers";
            return;
          }
          int& holder = run.buffer_holds[static_cast<size_t>(ins.buffer)];
          if (holder >= 0 && holder != static_cast<int>(mb) &&
              !run.backwarded[static_cast<size_t>(holder)])
            out.error = where(s, ins) + ": buffer " + std::to_string(ins.buffer) +
                        " still holds micro-batch " + std::to_string(holder % m) + " in flight";
          holder = static_cast<int>(mb);
        };
        const auto receive = [&](std::deque<Message>& channel) {
          if (channel.empty()) return false;  // wait for the sender
          if (channel.front().micro_batch != ins.micro_batch)
            out.error = where(s, ins) + ": the next message is micro-batch " +
                        std::to_string(channel.front().micro_batch);
          run.clock = std::max(run.clock, channel.front().time);
          channel.pop_front();
          return true;
        };
        bool waiting = false;  // a receive whose message has not been sent yet
        switch (ins.op) {
          case Op::kRecvActivation:
            if (!receive(channel(activations, {s, ins.chunk}))) {
              waiting = true;
              break;
            }
            take_buffer();
            run.has_input[mb] = 1;
            break;
          case Op::kLoadMicroBatch:
            if (first_virtual) {
              take_buffer();
              run.has_input[mb] = 1;
            }
            break;
          case Op::kRecvGrad:
            if (!receive(channel(grads, {s, ins.chunk}))) {
              waiting = true;
              break;
            }
            run.has_output_grad[mb] = 1;
            break;
          case Op::kSendActivation:
            if (last_virtual || !run.forwarded[mb]) {
              out.error = where(s, ins) + ": sent before its forward, or by the last stage";
              break;
            }
            channel(activations, s + 1 < p ? Place{s + 1, ins.chunk} : Place{0, ins.chunk + 1})
                .push_back({ins.micro_batch, run.clock});
            break;
          case Op::kSendGrad:
            if (first_virtual || !run.backwarded[mb]) {
              out.error = where(s, ins) + ": sent before its backward, or by the first stage";
              break;
            }
            channel(grads, s > 0 ? Place{s - 1, ins.chunk} : Place{p - 1, ins.chunk - 1})
                .push_back({ins.micro_batch, run.clock});
            break;
          case Op::kForwardPass:
            if (!run.has_input[mb] || run.forwarded[mb]++)
              out.error = where(s, ins) + ": forward without its input, or twice";
            run.clock += costs.forward;
            out.busy[static_cast<size_t>(s)] += costs.forward;
            break;
          case Op::kBackwardPass:
            if (!run.forwarded[mb] || (!last_virtual && !run.has_output_grad[mb]) ||
                run.backwarded[mb]++)
              out.error =
                  where(s, ins) + ": backward before its forward or output gradient, or twice";
            run.clock += costs.backward;
            out.busy[static_cast<size_t>(s)] += costs.backward;
            break;
          case Op::kReduceTiedGrads:
          case Op::kReduceGrads:
          case Op::kOptimizerStep:
            break;
        }
        if (waiting) break;
        ++run.next;
        progressed = true;
      }
    }
  }
  std::string stuck;  // every stage that cannot go on, each waiting for another
  for (int s = 0; s < p; ++s) {
    const StageRun& run = runs[static_cast<size_t>(s)];
    if (run.next < run.program.size())
      stuck += (stuck.empty() ? "" : "; ") + where(s, run.program[run.next]);
  }
  if (out.error.empty() && !stuck.empty()) out.error = "deadlock: " + stuck + " wait forever";
  for (int s = 0; s < p && out.error.empty(); ++s) {
    const StageRun& run = runs[static_cast<size_t>(s)];
    if (std::count(run.backwarded.begin(), run.backwarded.end(), 1) != m * v) {
      out.error = "stage " + std::to_string(s) + " did not run every micro-batch backward once";
    }
    out.makespan = std::max(out.makespan, run.clock);
  }
  return out;
}

}  // namespace dscore::pipeline
