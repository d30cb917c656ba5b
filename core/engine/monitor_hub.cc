#include "core/engine/monitor_hub.h"

#include <chrono>

#include "core/base/logging.h"

namespace dscore {

MonitorHub::MonitorHub(std::vector<std::unique_ptr<plugin_host::MonitorInstance>> monitors)
    : monitors_(std::move(monitors)) {}

void MonitorHub::write(const std::vector<ScalarEvent>& events) {
  if (monitors_.empty() || events.empty()) return;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<dscore_scalar_event> c_events(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    c_events[i].struct_size = sizeof(dscore_scalar_event);
    c_events[i].tag = events[i].tag.c_str();
    c_events[i].value = events[i].value;
    c_events[i].step = events[i].step;
    c_events[i].wall_time = now;
  }
  for (size_t i = 0; i < monitors_.size();) {
    Status status = monitors_[i]->write_scalars(c_events);
    if (status.ok()) {
      ++i;
    } else {
      disable(i, status);
    }
  }
}

void MonitorHub::flush() {
  for (size_t i = 0; i < monitors_.size();) {
    Status status = monitors_[i]->flush();
    if (status.ok()) {
      ++i;
    } else {
      disable(i, status);
    }
  }
}

void MonitorHub::disable(size_t i, const Status& status) {
  log_warning(status.message() +
              "; this monitor is disabled for the rest of the run, training goes on");
  monitors_.erase(monitors_.begin() + static_cast<std::ptrdiff_t>(i));
}

}  // namespace dscore
