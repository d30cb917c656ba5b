// The model's hooks (sdk/include/dscore/model.h): acquire, release and
// grads_ready, each checked and handed to the ZeRO strategy, and what a
// model call left behind checked once it returns.
#include <cstddef>

#include "core/engine/engine.h"

namespace dscore {

dscore_status Engine::fail_hook(dscore_status code, const std::string& message) {
  if (hook_error_.empty()) hook_error_ = message;
  return code;
}

dscore_status Engine::hook_acquire(void* ctx, size_t layer, dscore_acquire_mode mode,
                                   dscore_layer_views* out) {
  Engine* self = static_cast<Engine*>(ctx);
  PhaseScope hook(self->observers_, StepPhase::kHook);
  if (layer >= self->layout_.layer_count())
    return self->fail_hook(DSCORE_INVALID_ARGUMENT,
                           "acquire(" + std::to_string(layer) + "): the model has only " +
                               std::to_string(self->layout_.layer_count()) + " layers");
  if (out == nullptr || out->struct_size < offsetof(dscore_layer_views, grads) + sizeof(void*))
    return self->fail_hook(DSCORE_INVALID_ARGUMENT,
                           "acquire: views struct missing or struct_size too small");
  for (StepObserver* o : self->observers_) o->on_acquire(layer, mode);
  // A model that computes on the compute stream (the hooks' stream) may
  // take views that are ready in its order: no host wait for a gather.
  const bool stream_ordered =
      out->struct_size >= offsetof(dscore_layer_views, flags) + sizeof(out->flags) &&
      (out->flags & DSCORE_VIEWS_STREAM_ORDERED) != 0 && self->compute_->native() != nullptr;
  Status status =
      self->strategy_->acquire(layer, mode, stream_ordered ? self->compute_.get() : nullptr, out);
  if (!status.ok()) return self->fail_hook(status.code(), status.message());
  for (StepObserver* o : self->observers_) o->on_acquired(layer, mode);
  self->acquired_[layer] += 1;
  return DSCORE_OK;
}

dscore_status Engine::hook_release(void* ctx, size_t layer) {
  Engine* self = static_cast<Engine*>(ctx);
  PhaseScope hook(self->observers_, StepPhase::kHook);
  if (layer >= self->layout_.layer_count() || self->acquired_[layer] == 0)
    return self->fail_hook(DSCORE_FAILED_PRECONDITION,
                           "release(" + std::to_string(layer) + ") without a matching acquire");
  self->acquired_[layer] -= 1;
  for (StepObserver* o : self->observers_) o->on_release(layer);
  self->after_model_work();
  Status status = self->strategy_->release(layer);
  return status.ok() ? DSCORE_OK : self->fail_hook(status.code(), status.message());
}

dscore_status Engine::hook_grads_ready(void* ctx, size_t layer) {
  Engine* self = static_cast<Engine*>(ctx);
  PhaseScope hook(self->observers_, StepPhase::kHook);
  if (layer >= self->layout_.layer_count() || self->acquired_[layer] == 0)
    return self->fail_hook(DSCORE_FAILED_PRECONDITION,
                           "grads_ready(" + std::to_string(layer) + ") on a layer not acquired");
  self->after_model_work();
  Status status = self->strategy_->grads_ready(layer);
  return status.ok() ? DSCORE_OK : self->fail_hook(status.code(), status.message());
}

// On a GPU the model computes on the compute stream (hooks.stream) and may
// hand views back before its work on them is done: what the engine does
// with them next goes on the comm stream (reductions, gathers into reused
// memory, stream-ordered frees), which waits for that work here.
void Engine::after_model_work() {
  if (compute_->native() != nullptr) stream_->wait(compute_->record());
}

dscore_model_hooks Engine::model_hooks() {
  dscore_model_hooks hooks{};
  hooks.struct_size = sizeof hooks;
  hooks.ctx = this;
  hooks.acquire = &Engine::hook_acquire;
  hooks.release = &Engine::hook_release;
  hooks.grads_ready = &Engine::hook_grads_ready;
  hooks.stream = compute_->native();  // a cudaStream_t on a GPU, else NULL
  hook_error_.clear();
  return hooks;
}

// After the model returned: a hook misuse first, then the model's own
// error, then a layer left acquired.
Status Engine::check_model_call(const Status& model_status) {
  if (!hook_error_.empty())
    return Status(DSCORE_INVALID_ARGUMENT,
                  model_->display_name() + " misused the engine's hooks: " + hook_error_);
  DSCORE_RETURN_IF_ERROR(model_status);
  for (size_t l = 0; l < acquired_.size(); ++l) {
    if (acquired_[l] != 0) {
      acquired_.assign(acquired_.size(), 0);
      return Status(DSCORE_INVALID_ARGUMENT, model_->display_name() + " returned with layer " +
                                                 std::to_string(l) +
                                                 " still acquired; every "
                                                 "acquire needs a release");
    }
  }
  return Status::Ok();
}

}  // namespace dscore
