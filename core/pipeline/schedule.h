// The pipeline's schedules: which instruction each stage runs at each step
// of a training batch. train_schedule() is DeepSpeed's TrainSchedule (1F1B,
// deepspeed/runtime/pipe/schedule.py) instruction for instruction: a stage
// alternates one forward and one backward once the pipe is full, keeping at
// most `stages - stage_id` micro-batches' activations.
// interleaved_schedule() is Megatron-LM's interleaved 1F1B, which DeepSpeed
// lacks: each stage holds `virtual_stages` chunks of layers (chunk c of
// stage s is virtual stage c * stages + s), which shrinks the bubble by that
// factor. The engine's executor (core/engine/pipeline_step.cc) runs these
// lists; tests/core/pipeline holds the first to DeepSpeed's own and runs
// both (simulate.h).
#pragma once

#include <string>
#include <vector>

namespace dscore::pipeline {

enum class Op {
  kLoadMicroBatch,  // the first stage reads its inputs, the last its labels
  kForwardPass,
  kBackwardPass,
  kSendActivation,   // to the next stage
  kRecvActivation,   // from the previous stage
  kSendGrad,         // the input's gradient, to the previous stage
  kRecvGrad,         // the output's gradient, from the next stage
  kReduceTiedGrads,  // sum the tied layers' gradients (embedding and LM head)
  kReduceGrads,      // the data-parallel reduction of this stage's gradients
  kOptimizerStep,
};

const char* op_name(Op op);  // DeepSpeed's class name: "ForwardPass"

struct Instruction {
  Op op;
  int buffer = -1;       // the activation buffer (micro_batch % buffers); -1 for the reductions
  int micro_batch = -1;  // which micro-batch the buffer holds; -1 for the reductions
  int chunk = 0;         // the stage's chunk of layers (interleaved); 0 in 1F1B

  // DeepSpeed's repr: "ForwardPass(buffer_id=0)", "ReduceGrads()"; with a
  // chunk above 0 "ForwardPass(buffer_id=5, chunk=1)".
  std::string to_string() const;
};

using Step = std::vector<Instruction>;  // a step's instructions, in order

// The shape a schedule is made for; micro_batches is the config's
// gradient_accumulation_steps, as in DeepSpeed.
struct PipeShape {
  int stages = 1;
  int micro_batches = 1;
  int virtual_stages = 1;  // chunks per stage: 1 in 1F1B
};

// DeepSpeed's TrainSchedule for `stage`: 2 * (micro_batches + stages - 1)
// steps, each a forward or a backward slot (some empty while the pipe fills
// and drains); the last step reduces and steps the optimizer.
std::vector<Step> train_schedule(PipeShape shape, int stage);

// Megatron-LM's interleaved 1F1B for `stage` (shape.virtual_stages chunks):
// (stages - stage - 1) * 2 + (virtual_stages - 1) * stages warm-up
// forwards, then one forward and one backward a step, then the remaining
// backwards; micro-batches go through the chunks in groups of `stages`.
// Each step ends with its exchange, as Megatron's: the activation and
// gradient it produced go out, the next forward's activation and the next
// backward's gradient come in, ordered so that sends which wait for their
// receive cannot deadlock (schedule.cc; activations and gradients on
// communicators of their own). Each unit (micro-batch, chunk) holds a
// buffer of its chunk's from its first instruction to its last. Needs
// micro_batches a multiple of stages (as Megatron does);
// interleaved_schedule_error() says why a shape is refused.
std::vector<Step> interleaved_schedule(PipeShape shape, int stage);
std::string interleaved_schedule_error(PipeShape shape);  // empty: allowed

// The activation buffers `stage` needs. 1F1B: the micro-batches in flight
// at once, min(stages - stage, micro_batches), at least 2 (DeepSpeed's
// num_pipe_buffers). Interleaved: virtual_stages x the most units a chunk
// holds at once (buffer chunk * that + index).
int pipe_buffers(PipeShape shape, int stage);

// The most units (micro-batch, chunk) a schedule holds between their
// forward and backward at once: 1F1B's min(stages - stage, micro_batches).
int units_in_flight(const std::vector<Step>& schedule);

// The activation slots (distinct buffers its forwards use) of each of a
// stage's `chunks` chunks under `schedule`: the model keeps one slot per
// buffer a chunk's forwards write (model.h stage_forward).
std::vector<int> slots_per_chunk(const std::vector<Step>& schedule, int chunks);

// The share of each stage's time idle in a batch when every forward and
// backward of a chunk costs the same: (stages - 1) / (virtual_stages *
// micro_batches + stages - 1); 1F1B's (p - 1) / (m + p - 1) at one chunk.
double bubble_fraction(PipeShape shape);

}  // namespace dscore::pipeline
