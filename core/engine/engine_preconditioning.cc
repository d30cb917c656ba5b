// Whole-parameter preconditioning (Muon: preconditioner.h) in the
// boundary step, where DeepSpeed runs Muon's orthogonalization: at ZeRO
// stages 1-3 on the reduced gradients before their norm (the norm and
// clipping see the orthogonalized update), at stage 0 after the update was
// decided on the clipped gradients.
#include <string>

#include "core/base/logging.h"
#include "core/engine/engine.h"

namespace dscore {

Status Engine::setup_preconditioner() {
  if (!optimizer_->preconditioned().empty() && placement_.low_precision_master())
    return failed_precondition(optimizer_->instance().info().display() +
                               " updates whole weight matrices, which is not supported with "
                               "bf16_master_weights_and_grads yet: remove it, or use another "
                               "optimizer");
  DSCORE_ASSIGN_OR_RETURN(
      preconditioner_,
      Preconditioner::create(optimizer_.get(), strategy_.get(), layout_, &zero_group(),
                             placement_.stage > 0 && zero_group().world_size() > 1,
                             placement_.grad_dtype, device_->memory_is_host()));
  if (preconditioner_ && rank() == 0)
    log_info(optimizer_->instance().info().display() + " preconditions " +
             std::to_string(optimizer_->preconditioned().size()) + " of " +
             std::to_string(layout_.params().size()) + " parameters whole");
  return Status::Ok();
}

Status Engine::precondition_gradients(bool before_norm, double grad_scale) {
  if (!preconditioner_ || before_norm != (placement_.stage > 0)) return Status::Ok();
  DSCORE_RETURN_IF_ERROR(compute_->synchronize());  // the reduced gradients are final
  DSCORE_ASSIGN_OR_RETURN(dscore_schedule_point point, schedule_->current());
  return preconditioner_->run(point, global_steps_ - skipped_steps_ + 1, grad_scale,
                              1.0 / grad_scale);
}

}  // namespace dscore
