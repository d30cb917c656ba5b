// The pipeline's schedules: which instruction each stage runs at each step
// of a training batch. train_schedule() is DeepSpeed's TrainSchedule (1F1B,
// deepspeed/runtime/pipe/schedule.py) instruction for instruction: a stage
// alternates one forward and one backward once the pipe is full, keeping at
// most `stages - stage_id` micro-batches' activations. The executor (issue
// 47) runs these lists; tests/core/pipeline holds them to DeepSpeed's own.
#pragma once

#include <string>
#include <vector>

namespace dscore::pipeline {

enum class Op {
  kLoadMicroBatch,   // the first stage reads its inputs, the last its labels
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

  // DeepSpeed's repr: "ForwardPass(buffer_id=0)", "ReduceGrads()".
  std::string to_string() const;
};

using Step = std::vector<Instruction>;  // a step's instructions, in order

// The shape a schedule is made for; micro_batches is the config's
// gradient_accumulation_steps, as in DeepSpeed.
struct PipeShape {
  int stages = 1;
  int micro_batches = 1;
};

// DeepSpeed's TrainSchedule for `stage`: 2 * (micro_batches + stages - 1)
// steps, each a forward or a backward slot (some empty while the pipe fills
// and drains); the last step reduces and steps the optimizer.
std::vector<Step> train_schedule(PipeShape shape, int stage);

// The activation buffers `stage` needs: the micro-batches in flight at once,
// min(stages - stage, micro_batches), at least 2 (DeepSpeed's
// num_pipe_buffers).
int pipe_buffers(PipeShape shape, int stage);

// The share of each stage's time idle in a batch when forward and backward
// slots cost the same: (stages - 1) / (micro_batches + stages - 1).
double bubble_fraction(PipeShape shape);

}  // namespace dscore::pipeline
