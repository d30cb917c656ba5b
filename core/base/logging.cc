#include "core/base/logging.h"

#include "core/base/engine_scope.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace dscore {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("DSCORE_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int> g_level{static_cast<int>(initial_level())};
std::atomic<int> g_rank{-1};
std::mutex g_mutex;
LogFormatter g_formatter;  // guarded by g_mutex

const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug: ";
    case LogLevel::kWarning:
      return "warning: ";
    case LogLevel::kError:
      return "error: ";
    default:
      return "";
  }
}

}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_rank(int rank, int world_size) { g_rank = world_size > 1 ? rank : -1; }

int log_rank() {
  const std::shared_ptr<const EngineIdentity>& engine = EngineScope::current();
  return engine ? engine->log_rank.load() : g_rank.load();
}

void set_log_formatter(LogFormatter formatter) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_formatter = std::move(formatter);
}

void log(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) < g_level.load()) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_formatter) {
      std::string line = g_formatter(level, log_rank(), message) + "\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fflush(stderr);
      return;
    }
  }
  std::string line = "[dscore";
  if (int rank = log_rank(); rank >= 0) line += " rank " + std::to_string(rank);
  line += "] ";
  line += level_tag(level);
  line += message;
  line += '\n';
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace dscore
