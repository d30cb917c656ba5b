#include "simulate.h"

#include <algorithm>
#include <deque>
#include <numeric>

namespace dscore::pipeline {
namespace {

// A message on the channel from one stage to another: what it carries
// (an activation or a gradient, for the receiver's chunk) and when it was
// sent.
struct Message {
  Op kind;  // kSendActivation or kSendGrad
  int chunk;
  int micro_batch;
  double time;
};

// The messages from one stage to another, matched in order (as
// point-to-point calls are); received_at[n] is when the n-th was received.
struct Channel {
  std::deque<Message> queued;
  std::vector<double> received_at;
  size_t sent = 0;
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
  // The send this stage waits in (rendezvous): its channel and number.
  Channel* waiting_on = nullptr;
  size_t waiting_for = 0;
};

std::string where(int stage, const Instruction& ins) {
  return "stage " + std::to_string(stage) + " at " + ins.to_string() + " (micro-batch " +
         std::to_string(ins.micro_batch) + ")";
}

// A stage's chunk.
struct Place {
  int stage;
  int chunk;
};

// Every stage's progress and the channels between them, run until no stage
// can go on; the result lands in `out`.
class Simulator {
 public:
  Simulator(PipeShape shape, const std::vector<std::vector<Step>>& schedules, SlotCosts costs,
            Delivery delivery, Simulation* out)
      : p_(shape.stages),
        m_(shape.micro_batches),
        v_(shape.virtual_stages),
        costs_(costs),
        delivery_(delivery),
        out_(out),
        runs_(static_cast<size_t>(p_)),
        channels_(static_cast<size_t>(2 * p_ * p_)) {
    for (int s = 0; s < p_; ++s) {
      StageRun& run = runs_[static_cast<size_t>(s)];
      for (const Step& step : schedules[static_cast<size_t>(s)])
        run.program.insert(run.program.end(), step.begin(), step.end());
      run.buffer_holds.assign(static_cast<size_t>(pipe_buffers(shape, s)), -1);
      for (auto* per_unit : {&run.forwarded, &run.backwarded, &run.has_input, &run.has_output_grad})
        per_unit->assign(static_cast<size_t>(m_ * v_), 0);
    }
    out_->busy.assign(static_cast<size_t>(p_), 0.0);
  }

  // Round after round over the stages, each as far as it gets.
  void run() {
    for (bool progressed = true; progressed && ok();) {
      progressed = false;
      for (int s = 0; s < p_ && ok(); ++s) {
        StageRun& run = runs_[static_cast<size_t>(s)];
        while (run.next < run.program.size() && ok() && execute(s, run.program[run.next])) {
          ++run.next;
          progressed = true;
        }
      }
    }
  }

  // Stages left waiting are a deadlock; each stage must have run every unit
  // backward once. The makespan is the last stage's clock.
  void finish() {
    std::string stuck;  // every stage that cannot go on, each waiting for another
    for (int s = 0; s < p_; ++s) {
      const StageRun& run = runs_[static_cast<size_t>(s)];
      if (run.next < run.program.size())
        stuck += (stuck.empty() ? "" : "; ") + where(s, run.program[run.next]);
    }
    if (ok() && !stuck.empty()) out_->error = "deadlock: " + stuck + " wait forever";
    for (int s = 0; s < p_ && ok(); ++s) {
      const StageRun& run = runs_[static_cast<size_t>(s)];
      if (std::count(run.backwarded.begin(), run.backwarded.end(), 1) != m_ * v_)
        out_->error = "stage " + std::to_string(s) + " did not run every micro-batch backward once";
      out_->makespan = std::max(out_->makespan, run.clock);
    }
  }

 private:
  bool ok() const { return out_->error.empty(); }
  void fail(int s, const Instruction& ins, const std::string& what) {
    out_->error = where(s, ins) + ": " + what;
  }

  Channel& channel(Op kind, int from, int to) {
    const int grads = kind == Op::kSendGrad ? 1 : 0;
    return channels_[static_cast<size_t>((grads * p_ + from) * p_ + to)];
  }

  // Stage s runs `ins`; false while it waits for a message not sent yet.
  bool execute(int s, const Instruction& ins) {
    if (ins.micro_batch >= m_ || ins.chunk < 0 || ins.chunk >= v_) {
      fail(s, ins,
           "there are " + std::to_string(m_) + " micro-batches and " + std::to_string(v_) +
               " chunks");
      return false;
    }
    StageRun& run = runs_[static_cast<size_t>(s)];
    const size_t unit = static_cast<size_t>(ins.chunk * m_ + std::max(ins.micro_batch, 0));
    const bool first_virtual = s == 0 && ins.chunk == 0;
    const bool last_virtual = s == p_ - 1 && ins.chunk == v_ - 1;
    switch (ins.op) {
      case Op::kRecvActivation:
        if (!receive(s, ins, first_virtual ? Place{-1, 0} : before(s, ins.chunk))) return false;
        take_buffer(s, ins, unit);
        run.has_input[unit] = 1;
        break;
      case Op::kLoadMicroBatch:
        if (first_virtual) {
          take_buffer(s, ins, unit);
          run.has_input[unit] = 1;
        }
        break;
      case Op::kRecvGrad:
        if (!receive(s, ins, last_virtual ? Place{-1, 0} : after(s, ins.chunk))) return false;
        run.has_output_grad[unit] = 1;
        break;
      case Op::kSendActivation:
        if (last_virtual || !run.forwarded[unit]) {
          fail(s, ins, "sent before its forward, or by the last stage");
          break;
        }
        return send(s, ins, after(s, ins.chunk));
      case Op::kSendGrad:
        if (first_virtual || !run.backwarded[unit]) {
          fail(s, ins, "sent before its backward, or by the first stage");
          break;
        }
        return send(s, ins, before(s, ins.chunk));
      case Op::kForwardPass:
        if (!run.has_input[unit] || run.forwarded[unit]++)
          fail(s, ins, "forward without its input, or twice");
        compute(s, costs_.forward * costs_.weight(s, ins.chunk, p_));
        break;
      case Op::kBackwardPass:
        if (!run.forwarded[unit] || (!last_virtual && !run.has_output_grad[unit]) ||
            run.backwarded[unit]++)
          fail(s, ins, "backward before its forward or output gradient, or twice");
        compute(s, costs_.backward * costs_.weight(s, ins.chunk, p_));
        break;
      case Op::kReduceTiedGrads:
      case Op::kReduceGrads:
      case Op::kOptimizerStep:
        break;
    }
    return true;
  }

  void compute(int s, double cost) {
    runs_[static_cast<size_t>(s)].clock += cost;
    out_->busy[static_cast<size_t>(s)] += cost;
  }

  // The virtual stages before and after stage s's chunk.
  Place before(int s, int chunk) const {
    return s > 0 ? Place{s - 1, chunk} : Place{p_ - 1, chunk - 1};
  }
  Place after(int s, int chunk) const {
    return s + 1 < p_ ? Place{s + 1, chunk} : Place{0, chunk + 1};
  }

  // Posts the message to `to` (once); buffered it goes on at once, in a
  // rendezvous only once `to` has received it.
  bool send(int s, const Instruction& ins, Place to) {
    StageRun& run = runs_[static_cast<size_t>(s)];
    Channel& ch = channel(ins.op, s, to.stage);
    if (run.waiting_on == nullptr) {
      ch.queued.push_back({ins.op, to.chunk, ins.micro_batch, run.clock});
      run.waiting_on = &ch;
      run.waiting_for = ch.sent++;
    }
    if (delivery_ == Delivery::kRendezvous) {
      if (ch.received_at.size() <= run.waiting_for) return false;
      run.clock = std::max(run.clock, ch.received_at[run.waiting_for]);
    }
    run.waiting_on = nullptr;
    return true;
  }

  // The next message from `from`, which must be this instruction's; false
  // when none was sent yet.
  bool receive(int s, const Instruction& ins, Place from) {
    if (from.stage < 0) {
      fail(s, ins, "the first stage receives no activation, the last no gradient");
      return false;
    }
    const Op kind = ins.op == Op::kRecvActivation ? Op::kSendActivation : Op::kSendGrad;
    Channel& ch = channel(kind, from.stage, s);
    if (ch.queued.empty()) return false;
    const Message& next = ch.queued.front();
    if (next.kind != kind || next.chunk != ins.chunk || next.micro_batch != ins.micro_batch) {
      fail(s, ins,
           "the next message from stage " + std::to_string(from.stage) + " is " +
               (next.kind == Op::kSendActivation ? "an activation" : "a gradient") +
               " of micro-batch " + std::to_string(next.micro_batch) + " for chunk " +
               std::to_string(next.chunk));
      return false;
    }
    StageRun& run = runs_[static_cast<size_t>(s)];
    run.clock = std::max(run.clock, next.time);
    ch.received_at.push_back(run.clock);
    ch.queued.pop_front();
    return true;
  }

  // The instruction's buffer now holds `unit`; its last holder must be done.
  void take_buffer(int s, const Instruction& ins, size_t unit) {
    StageRun& run = runs_[static_cast<size_t>(s)];
    if (ins.buffer < 0 || ins.buffer >= static_cast<int>(run.buffer_holds.size())) {
      fail(s, ins, "the stage has " + std::to_string(run.buffer_holds.size()) + " buffers");
      return;
    }
    int& holder = run.buffer_holds[static_cast<size_t>(ins.buffer)];
    if (holder >= 0 && holder != static_cast<int>(unit) &&
        !run.backwarded[static_cast<size_t>(holder)])
      fail(s, ins,
           "buffer " + std::to_string(ins.buffer) + " still holds micro-batch " +
               std::to_string(holder % m_) + " in flight");
    holder = static_cast<int>(unit);
  }

  const int p_, m_, v_;
  const SlotCosts costs_;
  const Delivery delivery_;
  Simulation* out_;
  std::vector<StageRun> runs_;
  // [(kind * stages + from) * stages + to]: activations and gradients go
  // on communicators of their own (the executor's pipe and grad groups).
  std::vector<Channel> channels_;
};

}  // namespace

double Simulation::bubble() const {
  if (busy.empty() || makespan <= 0) return 0;
  const double mean = std::accumulate(busy.begin(), busy.end(), 0.0) / busy.size();
  return 1.0 - mean / makespan;
}

Simulation simulate(PipeShape shape, const std::vector<std::vector<Step>>& schedules,
                    SlotCosts costs, Delivery delivery) {
  Simulation out;
  if (static_cast<int>(schedules.size()) != shape.stages) {
    out.error = "expected one schedule per stage";
    return out;
  }
  Simulator simulator(shape, schedules, costs, delivery, &out);
  simulator.run();
  simulator.finish();
  return out;
}

}  // namespace dscore::pipeline
