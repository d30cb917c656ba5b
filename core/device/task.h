// Running one stream task: a task that throws (a broken invariant inside
// it) becomes an INTERNAL status naming the stream, so a stream never lets
// an exception escape into a worker thread or the engine's step.
#pragma once

#include <exception>
#include <string>
#include <string_view>

#include "core/device/device.h"

namespace dscore::device {

inline Status run_task(const Stream::Task& task, std::string_view stream) {
  try {
    return task();
  } catch (const std::exception& e) {
    return internal_error("stream \"" + std::string(stream) + "\": a task threw: " + e.what());
  } catch (...) {
    return internal_error("stream \"" + std::string(stream) + "\": a task threw a non-exception");
  }
}

}  // namespace dscore::device
