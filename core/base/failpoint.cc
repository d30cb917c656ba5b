#include "core/base/failpoint.h"

#include <csignal>
#include <cstdlib>
#include <string>

namespace dscore {

bool failpoint_armed(std::string_view name, int rank) {
  static const std::string armed = [] {
    const char* v = std::getenv("DSCORE_FAILPOINTS");
    return v == nullptr ? std::string() : "," + std::string(v) + ",";
  }();
  if (armed.empty()) return false;
  const std::string any = "," + std::string(name) + ",";
  const std::string mine = "," + std::string(name) + "@" + std::to_string(rank) + ",";
  return armed.find(any) != std::string::npos || armed.find(mine) != std::string::npos;
}

void failpoint(std::string_view name, int rank) {
  if (failpoint_armed(name, rank)) raise(SIGKILL);
}

}  // namespace dscore
