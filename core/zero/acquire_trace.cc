#include "core/zero/acquire_trace.h"

#include "core/base/logging.h"

namespace dscore::zero {

void AcquireTrace::observe(size_t position, size_t layer, dscore_acquire_mode mode) {
  if (recording_) {
    events_.push_back({layer, mode});
  } else if (valid_ && (position >= events_.size() || events_[position].layer != layer ||
                        events_[position].mode != mode)) {
    log_debug("zero-3: the model's acquire order changed; prefetching stops for this run");
    valid_ = false;
  }
}

void AcquireTrace::finish(const std::vector<int64_t>& layer_elements) {
  next_use_.assign(events_.size(), kNever);
  std::vector<size_t> seen(layer_elements.size(), kNever);
  for (size_t i = events_.size(); i-- > 0;) {
    next_use_[i] = seen[events_[i].layer];
    seen[events_[i].layer] = i;
  }
  elements_before_.assign(events_.size() + 1, 0);
  for (size_t i = 0; i < events_.size(); ++i)
    elements_before_[i + 1] = elements_before_[i] + layer_elements[events_[i].layer];
  recording_ = false;
  valid_ = true;
}

}  // namespace dscore::zero
