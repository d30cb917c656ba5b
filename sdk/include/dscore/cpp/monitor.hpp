// Optional header-only helper for monitor plugins written in C++: the events
// of one write_scalars() call, each checked before use. Nothing here crosses
// the ABI; problems are thrown as sdk::Error for sdk::guard().
#ifndef DSCORE_CPP_MONITOR_HPP_
#define DSCORE_CPP_MONITOR_HPP_

#include <dscore/monitor.h>
#include <dscore/cpp/plugin.hpp>

#include <string>

namespace dscore::sdk {

// Calls fn(event, has_wall_time) for each event in order. An event that is
// NULL or too small to hold `step` is an error naming its index; wall_time is
// an appended field, read only when has_wall_time.
template <typename Fn>
void for_each_event(const dscore_scalar_event* const* events, size_t count, Fn&& fn) {
  using E = dscore_scalar_event;
  for (size_t i = 0; i < count; ++i) {
    const E* e = events[i];
    if (e == nullptr || !DSCORE_HAS_FIELD(e, E, step))
      throw Error(DSCORE_INVALID_ARGUMENT, "event " + std::to_string(i) + " is NULL or too small");
    fn(*e, DSCORE_HAS_FIELD(e, E, wall_time));
  }
}

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_MONITOR_HPP_
