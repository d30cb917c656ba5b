// The order in which a model acquires its layers, as ZeRO-3 follows it: the
// first forward_backward records every acquire; later ones are checked
// against the recording, and the precomputed "where is this layer used
// next" and "elements gathered before event i" turn prefetch windows and
// reuse distances into subtractions. A model whose order changes makes the
// trace invalid for the rest of the run (prefetching stops, nothing breaks).
#pragma once

#include <dscore/model.h>

#include <cstdint>
#include <vector>

namespace dscore::zero {

class AcquireTrace {
 public:
  static constexpr size_t kNever = static_cast<size_t>(-1);
  struct Event {
    size_t layer;
    dscore_acquire_mode mode;
  };

  // Event `position` of this forward_backward acquires (layer, mode):
  // appended while recording, else compared with the recording.
  void observe(size_t position, size_t layer, dscore_acquire_mode mode);
  // Ends the recording; layer_elements[l] is what gathering layer l costs.
  void finish(const std::vector<int64_t>& layer_elements);

  bool recording() const { return recording_; }
  bool valid() const { return valid_; }  // recorded, and followed so far
  size_t size() const { return events_.size(); }
  const Event& event(size_t i) const { return events_[i]; }
  // Index of the next event of event i's layer, or kNever.
  size_t next_use(size_t i) const { return next_use_[i]; }
  // Elements gathered by events [from, to).
  int64_t elements_between(size_t from, size_t to) const {
    return elements_before_[to] - elements_before_[from];
  }

 private:
  std::vector<Event> events_;
  bool recording_ = true;
  bool valid_ = false;
  std::vector<size_t> next_use_;          // per event
  std::vector<int64_t> elements_before_;  // per event index, size() + 1 entries
};

}  // namespace dscore::zero
