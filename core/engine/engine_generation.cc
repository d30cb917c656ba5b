// Engine: KV-cached generation (Model::decode_cache, decode) on the
// engine's parameters, for `dscore generate` and `serve` (core/app).
#include "core/base/engine_scope.h"
#include "core/engine/engine.h"

namespace dscore {

Result<std::unique_ptr<Model::DecodeCache>> Engine::decode_cache(int64_t slots,
                                                                 int64_t max_positions) {
  EngineScope engine(host_->identity());
  return model_->decode_cache(slots, max_positions, placement_.model_dtype);
}

Status Engine::decode(Model::DecodeCache& cache, const dscore_decode_batch& batch,
                      dscore_tensor* logits) {
  EngineScope engine(host_->identity());
  const dscore_model_hooks hooks = model_hooks();
  if (placement_.stage != 3) return check_model_call(model_->decode(cache, batch, hooks, logits));
  // ZeRO-Inference: each step a micro-step of stage 3's gathers, so the
  // first records the order the decoder acquires its layers in and the
  // later ones prefetch (and read from NVMe) the next layers along it.
  strategy_->begin_micro_step(false);
  const Status status = model_->decode(cache, batch, hooks, logits);
  const Status finished = strategy_->end_micro_step();
  DSCORE_RETURN_IF_ERROR(check_model_call(status));
  return finished;
}

}  // namespace dscore
