#include "schedule.h"

#include <algorithm>

namespace dscore::pipeline {
namespace {

bool is_even(int n) { return n % 2 == 0; }

// The micro-batch a step of `stage` works on, and whether it is a forward
// slot: even stages run forwards on even steps, odd stages on odd steps.
struct Slot {
  int micro_batch;
  bool forward;
};

Slot slot_of(PipeShape shape, int stage, int step) {
  const bool forward = is_even(step) == is_even(stage);
  if (forward) return {(is_even(step) ? step : step - 1) / 2 - stage / 2, true};
  if (is_even(step)) return {step / 2 - shape.stages + (stage + 1) / 2, false};
  return {(step - 1) / 2 - shape.stages + 1 + stage / 2, false};
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kLoadMicroBatch:
      return "LoadMicroBatch";
    case Op::kForwardPass:
      return "ForwardPass";
    case Op::kBackwardPass:
      return "BackwardPass";
    case Op::kSendActivation:
      return "SendActivation";
    case Op::kRecvActivation:
      return "RecvActivation";
    case Op::kSendGrad:
      return "SendGrad";
    case Op::kRecvGrad:
      return "RecvGrad";
    case Op::kReduceTiedGrads:
      return "ReduceTiedGrads";
    case Op::kReduceGrads:
      return "ReduceGrads";
    case Op::kOptimizerStep:
      break;
  }
  return "OptimizerStep";
}

std::string Instruction::to_string() const {
  if (buffer < 0) return std::string(op_name(op)) + "()";
  return std::string(op_name(op)) + "(buffer_id=" + std::to_string(buffer) + ")";
}

int pipe_buffers(PipeShape shape, int stage) {
  return std::max(2, std::min(shape.stages - stage, shape.micro_batches));
}

double bubble_fraction(PipeShape shape) {
  return static_cast<double>(shape.stages - 1) / (shape.micro_batches + shape.stages - 1);
}

std::vector<Step> train_schedule(PipeShape shape, int stage) {
  const int steps = 2 * (shape.micro_batches + shape.stages - 1);
  const int buffers = pipe_buffers(shape, stage);
  const bool has_prev = stage > 0, has_next = stage + 1 < shape.stages;
  const auto valid = [&](int micro_batch) {
    return micro_batch >= 0 && micro_batch < shape.micro_batches;
  };
  const auto at = [&](Op op, int micro_batch) {
    return Instruction{op, micro_batch % buffers, micro_batch};
  };
  std::vector<Step> schedule(static_cast<size_t>(steps));
  int prev = -1;  // the previous step's micro-batch
  for (int step = 0; step < steps; ++step) {
    const Slot slot = slot_of(shape, stage, step);
    Step& out = schedule[static_cast<size_t>(step)];
    // Exchanges: what the previous slot produced goes out, this slot's input comes in.
    if (slot.forward) {
      if (valid(prev) && has_prev) out.push_back(at(Op::kSendGrad, prev));
      if (valid(slot.micro_batch) && has_prev) out.push_back(at(Op::kRecvActivation, slot.micro_batch));
    } else {
      if (valid(slot.micro_batch) && has_next) out.push_back(at(Op::kRecvGrad, slot.micro_batch));
      if (valid(prev) && has_next) out.push_back(at(Op::kSendActivation, prev));
    }
    const bool loads = stage == 0 || stage == shape.stages - 1;
    if (loads && slot.forward && valid(slot.micro_batch))
      out.push_back(at(Op::kLoadMicroBatch, slot.micro_batch));
    if (valid(slot.micro_batch))
      out.push_back(at(slot.forward ? Op::kForwardPass : Op::kBackwardPass, slot.micro_batch));
    if (step == steps - 1) {
      out.push_back({Op::kReduceTiedGrads});
      out.push_back({Op::kReduceGrads});
      out.push_back({Op::kOptimizerStep});
    }
    prev = slot.micro_batch;
  }
  return schedule;
}

}  // namespace dscore::pipeline
