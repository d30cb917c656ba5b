// Whole-parameter preconditioning (optimizer.h precondition(), ABI 1.2):
// Muon orthogonalizes each weight matrix's momentum, which needs the whole
// matrix while ZeRO gives each rank a slice of it. Before an update this
// gathers each preconditioned parameter's reduced gradient and the
// optimizer's slot 0 (its momentum) from the ranks that own them (one
// allreduce of zero-filled buckets: every element has one owner, so the sum
// is that owner's value exactly), lets the plugin transform the whole
// parameter, and keeps this rank's part of the gradient and the slot. Each
// parameter is transformed by one rank of the group, round-robin, and the
// results shared by a second sum (DeepSpeed's ZeRO 3 spreads its matrices
// the same way; its ZeRO 1/2 computes a split matrix on every rank).
//
// A parameter whose gathered gradient is not finite is left alone, its
// slot unchanged (DeepSpeed's Muon keeps the momentum out of an overflowed
// step): the norm then sees the overflow and the step is skipped.
#pragma once

#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "core/engine/optimizer_runner.h"
#include "core/zero/param_layout.h"
#include "core/zero/zero_strategy.h"

namespace dscore {

class Preconditioner {
 public:
  // nullptr when the optimizer preconditions no parameter. Fails, naming
  // the optimizer, where the state is not one in-memory space on the host
  // (optimizer offload, a device's memory, expert parallelism's split).
  // `group`: the ranks that partition the owned space (ZeRO's group);
  // `partitioned`: whether they do (stages 1-3 on more than one rank).
  static Result<std::unique_ptr<Preconditioner>> create(OptimizerRunner* runner,
                                                        zero::ZeroStrategy* strategy,
                                                        const ParamLayout& layout,
                                                        comm::Communicator* group, bool partitioned,
                                                        dscore_dtype grad_dtype, bool host_memory);

  // Before update number `step` with the scheduled `point`: the plugin sees
  // each gradient times `in_scale`, and what it writes goes back times
  // `out_scale` (which step()'s grad_scale then cancels).
  Status run(const dscore_schedule_point& point, int64_t step, double in_scale, double out_scale);

 private:
  struct Whole {
    size_t param = 0;
    std::vector<zero::OwnedSegment> owned;  // this rank's runs of it
  };
  Preconditioner() = default;
  // Wholes [first, end) through one buffer: gather, transform, keep.
  Status run_bucket(size_t first, size_t end, const dscore_optimizer_hparams& hparams,
                    double in_scale, double out_scale, void* grads, float* slot);

  OptimizerRunner* runner_ = nullptr;
  zero::ZeroStrategy* strategy_ = nullptr;
  const ParamLayout* layout_ = nullptr;
  comm::Communicator* group_ = nullptr;
  bool partitioned_ = false;
  dscore_dtype grad_dtype_ = DSCORE_DTYPE_F32;
  std::vector<Whole> wholes_;  // layout order
  std::vector<float> buffer_;  // a bucket's gradients, then its slot values
};

}  // namespace dscore
