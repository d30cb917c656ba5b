// Fans training scalars out to the monitor plugins (rank 0 only). A monitor
// that fails mid-run is logged once and disabled; training goes on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/plugin_host/instances.h"

namespace dscore {

struct ScalarEvent {
  std::string tag;  // "Train/Samples/train_loss"
  double value = 0;
  int64_t step = 0;  // global_samples, DeepSpeed's x-axis
};

class MonitorHub {
 public:
  MonitorHub() = default;
  explicit MonitorHub(std::vector<std::unique_ptr<plugin_host::MonitorInstance>> monitors);

  void write(const std::vector<ScalarEvent>& events);
  void flush();
  bool empty() const { return monitors_.empty(); }

 private:
  void disable(size_t i, const Status& status);
  std::vector<std::unique_ptr<plugin_host::MonitorInstance>> monitors_;
};

}  // namespace dscore
