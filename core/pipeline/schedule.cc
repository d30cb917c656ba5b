#include "schedule.h"

#include <algorithm>
#include <set>
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

namespace {
std::vector<Step> interleaved_program(PipeShape shape, int stage, int* per_chunk);
}  // namespace

int pipe_buffers(PipeShape shape, int stage) {
  if (shape.virtual_stages > 1) {
    int per_chunk = 0;
    interleaved_program(shape, stage, &per_chunk);
    return shape.virtual_stages * per_chunk;
  }
  return std::max(2, std::min(shape.stages - stage, shape.micro_batches));
}

int units_in_flight(const std::vector<Step>& schedule) {
  int in_flight = 0, most = 0;
  for (const Step& step : schedule)
    for (const Instruction& ins : step) {
      if (ins.op == Op::kForwardPass) most = std::max(most, ++in_flight);
      if (ins.op == Op::kBackwardPass) --in_flight;
    }
  return most;
}

std::vector<int> slots_per_chunk(const std::vector<Step>& schedule, int chunks) {
  std::vector<std::set<int>> buffers(static_cast<size_t>(chunks));
  for (const Step& step : schedule)
    for (const Instruction& ins : step)
      if (ins.op == Op::kForwardPass && ins.chunk >= 0 && ins.chunk < chunks)
        buffers[static_cast<size_t>(ins.chunk)].insert(ins.buffer);
  std::vector<int> slots;
  for (const std::set<int>& b : buffers) slots.push_back(static_cast<int>(b.size()));
  return slots;
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

namespace {

// The unit (micro-batch, chunk) of the k-th forward or backward of a stage:
// micro-batches go through the chunks in groups of `stages`, forwards from
// the first chunk, backwards from the last.
std::pair<int, int> interleaved_unit(PipeShape shape, int k, bool forward) {
  const int p = shape.stages, v = shape.virtual_stages;
  const int in_group = k % (p * v);
  const int chunk = forward ? in_group / p : v - 1 - in_group / p;
  return {k / (p * v) * p + k % p, chunk};
}

// Gives each unit of the schedule a buffer: the lowest free one of its
// chunk's, taken at the unit's first instruction and free after its last.
// Buffer ids are chunk * per_chunk + index, per_chunk the most a chunk
// holds at once; returns per_chunk.
int assign_buffers(PipeShape shape, std::vector<Step>* schedule) {
  const int m = shape.micro_batches, v = shape.virtual_stages;
  const auto unit = [m](const Instruction& ins) { return ins.chunk * m + ins.micro_batch; };
  std::vector<std::pair<size_t, size_t>> last(static_cast<size_t>(m * v));  // (step, index)
  for (size_t s = 0; s < schedule->size(); ++s)
    for (size_t i = 0; i < (*schedule)[s].size(); ++i)
      if ((*schedule)[s][i].micro_batch >= 0)
        last[static_cast<size_t>(unit((*schedule)[s][i]))] = {s, i};
  std::vector<int> held(static_cast<size_t>(m * v), -1);
  std::vector<std::vector<bool>> busy(static_cast<size_t>(v));
  int per_chunk = 0;
  for (size_t s = 0; s < schedule->size(); ++s) {
    for (size_t i = 0; i < (*schedule)[s].size(); ++i) {
      Instruction& ins = (*schedule)[s][i];
      if (ins.micro_batch < 0) continue;
      const size_t u = static_cast<size_t>(unit(ins));
      std::vector<bool>& chunk_busy = busy[static_cast<size_t>(ins.chunk)];
      if (held[u] < 0) {
        const auto free = std::find(chunk_busy.begin(), chunk_busy.end(), false);
        held[u] = static_cast<int>(free - chunk_busy.begin());
        if (free == chunk_busy.end())
          chunk_busy.push_back(true);
        else
          *free = true;
        per_chunk = std::max(per_chunk, static_cast<int>(chunk_busy.size()));
      }
      ins.buffer = held[u];
      if (last[u] == std::pair<size_t, size_t>{s, i})
        chunk_busy[static_cast<size_t>(held[u])] = false;
    }
  }
  for (Step& step : *schedule)
    for (Instruction& ins : step)
      if (ins.micro_batch >= 0) ins.buffer += ins.chunk * per_chunk;
  return per_chunk;
}

std::vector<Step> interleaved_program(PipeShape shape, int stage, int* per_chunk) {
  const int p = shape.stages, v = shape.virtual_stages, m = shape.micro_batches;
  const int total = m * v;
  const int warmup = std::min(total, (p - stage - 1) * 2 + (v - 1) * p);
  // Virtual stage chunk * p + stage: the first takes the inputs, the last the labels.
  const auto first = [&](int chunk) { return chunk == 0 && stage == 0; };
  const auto last = [&](int chunk) { return chunk == v - 1 && stage == p - 1; };
  const auto at = [](Op op, std::pair<int, int> unit) {
    return Instruction{op, -1, unit.first, unit.second};
  };
  const auto fwd = [&](int k) { return interleaved_unit(shape, k, true); };
  const auto bwd = [&](int k) { return interleaved_unit(shape, k, false); };
  std::vector<Step> schedule;
  const auto forward = [&](Step* step, int k) {
    if (first(fwd(k).second) || last(fwd(k).second))
      step->push_back(at(Op::kLoadMicroBatch, fwd(k)));
    step->push_back(at(Op::kForwardPass, fwd(k)));
  };
  // The exchange after a step's compute: what it produced goes out (the
  // forward's activation, the backward's input gradient), what the next
  // forward and backward need comes in. A send may wait for its receive
  // (Delivery::kRendezvous), so the order matters: on each link the stage
  // before sends first; each stage serves its link to the next stage
  // first, except stage 0, which serves the link from the last stage (the
  // ring's wrap) first, so the waits unwind around the ring instead of
  // closing a cycle. Activations and gradients travel on communicators of
  // their own. tests/core/pipeline checks every shape under rendezvous.
  const auto exchange = [&](Step* step, int sent_forward, int sent_backward, int next_forward,
                            int next_backward) {
    // With the next stage: this stage's activation out, its gradient in;
    // with the previous one: its activation in, this stage's gradient out.
    Step next, previous;
    if (sent_forward >= 0 && !last(fwd(sent_forward).second))
      next.push_back(at(Op::kSendActivation, fwd(sent_forward)));
    if (next_backward >= 0 && next_backward < total && !last(bwd(next_backward).second))
      next.push_back(at(Op::kRecvGrad, bwd(next_backward)));
    if (next_forward >= 0 && next_forward < total && !first(fwd(next_forward).second))
      previous.push_back(at(Op::kRecvActivation, fwd(next_forward)));
    if (sent_backward >= 0 && !first(bwd(sent_backward).second))
      previous.push_back(at(Op::kSendGrad, bwd(sent_backward)));
    if (stage == 0) std::swap(next, previous);
    step->insert(step->end(), next.begin(), next.end());
    step->insert(step->end(), previous.begin(), previous.end());
  };
  Step start;
  exchange(&start, -1, -1, 0, -1);
  if (!start.empty()) schedule.push_back(std::move(start));
  for (int k = 0; k < warmup; ++k) {
    Step step;
    forward(&step, k);
    // The last warm-up forward also brings in the first backward's gradient.
    exchange(&step, k, -1, k + 1, k + 1 == warmup ? 0 : -1);
    schedule.push_back(std::move(step));
  }
  for (int i = 0; i < total - warmup; ++i) {
    Step step;
    forward(&step, warmup + i);
    step.push_back(at(Op::kBackwardPass, bwd(i)));
    exchange(&step, warmup + i, i, warmup + i + 1, i + 1);
    schedule.push_back(std::move(step));
  }
  for (int k = total - warmup; k < total; ++k) {
    Step step{at(Op::kBackwardPass, bwd(k))};
    exchange(&step, -1, k, -1, k + 1);
    schedule.push_back(std::move(step));
  }
  *per_chunk = assign_buffers(shape, &schedule);
  schedule.back().push_back({Op::kReduceTiedGrads});
  schedule.back().push_back({Op::kReduceGrads});
  schedule.back().push_back({Op::kOptimizerStep});
  return schedule;
}

}  // namespace

std::vector<Step> interleaved_schedule(PipeShape shape, int stage) {
  int per_chunk = 0;
  return interleaved_program(shape, stage, &per_chunk);
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
