#include "schedule.h"

#include <algorithm>
#include <utility>

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
  std::string text = std::string(op_name(op)) + "(buffer_id=" + std::to_string(buffer);
  if (chunk > 0) text += ", chunk=" + std::to_string(chunk);
  return text + ")";
}

int pipe_buffers(PipeShape shape, int stage) {
  if (shape.virtual_stages > 1) return shape.virtual_stages * shape.micro_batches;
  return std::max(2, std::min(shape.stages - stage, shape.micro_batches));
}

double bubble_fraction(PipeShape shape) {
  return static_cast<double>(shape.stages - 1) /
         (shape.virtual_stages * shape.micro_batches + shape.stages - 1);
}

std::string interleaved_schedule_error(PipeShape shape) {
  if (shape.virtual_stages < 2) return "the interleaved schedule needs virtual_stages >= 2";
  if (shape.stages < 2) return "the interleaved schedule needs at least 2 pipeline stages";
  if (shape.micro_batches % shape.stages != 0)
    return "the interleaved schedule needs the micro-batches (gradient_accumulation_steps, " +
           std::to_string(shape.micro_batches) + ") to be a multiple of the stages (" +
           std::to_string(shape.stages) + ")";
  return "";
}

std::vector<Step> interleaved_schedule(PipeShape shape, int stage) {
  const int p = shape.stages, v = shape.virtual_stages, m = shape.micro_batches;
  const int total = m * v;
  const int warmup = std::min(total, (p - stage - 1) * 2 + (v - 1) * p);
  // The k-th forward (or backward) of this stage: its micro-batch and chunk.
  const auto unit = [&](int k, bool forward) {
    const int in_group = k % (p * v);
    const int chunk = forward ? in_group / p : v - 1 - in_group / p;
    return std::pair<int, int>{k / (p * v) * p + k % p, chunk};
  };
  const auto at = [&](Op op, int micro_batch, int chunk) {
    return Instruction{op, chunk * m + micro_batch, micro_batch, chunk};
  };
  // Virtual stage chunk * p + stage: the first takes the inputs, the last the labels.
  const auto first = [&](int chunk) { return chunk == 0 && stage == 0; };
  const auto last = [&](int chunk) { return chunk == v - 1 && stage == p - 1; };
  std::vector<Step> schedule;
  const auto forward = [&](int k) {
    const auto [mb, chunk] = unit(k, true);
    Step step;
    if (!first(chunk)) step.push_back(at(Op::kRecvActivation, mb, chunk));
    if (first(chunk) || last(chunk)) step.push_back(at(Op::kLoadMicroBatch, mb, chunk));
    step.push_back(at(Op::kForwardPass, mb, chunk));
    if (!last(chunk)) step.push_back(at(Op::kSendActivation, mb, chunk));
    schedule.push_back(std::move(step));
  };
  const auto backward = [&](int k) {
    const auto [mb, chunk] = unit(k, false);
    Step step;
    if (!last(chunk)) step.push_back(at(Op::kRecvGrad, mb, chunk));
    step.push_back(at(Op::kBackwardPass, mb, chunk));
    if (!first(chunk)) step.push_back(at(Op::kSendGrad, mb, chunk));
    schedule.push_back(std::move(step));
  };
  for (int k = 0; k < warmup; ++k) forward(k);
  for (int i = 0; i < total - warmup; ++i) {
    forward(warmup + i);
    backward(i);
  }
  for (int k = total - warmup; k < total; ++k) backward(k);
  schedule.back().push_back({Op::kReduceTiedGrads});
  schedule.back().push_back({Op::kReduceGrads});
  schedule.back().push_back({Op::kOptimizerStep});
  return schedule;
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
      if (valid(slot.micro_batch) && has_prev)
        out.push_back(at(Op::kRecvActivation, slot.micro_batch));
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
