// Logging for core and, through the host services table, for plugins: one
// line per message on stderr, prefixed with the rank once a job has more than
// one (the rank of the engine the thread works for: engine_scope.h).
// Thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace dscore {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped (default: kInfo; DSCORE_LOG_LEVEL=debug lowers it).
void set_log_level(LogLevel level);
LogLevel log_level();

// The process-wide rank prefix (one rank per process: the dscore CLI sets
// it once the job is known); no prefix for a job of one rank. A thread
// working for an engine (engine_scope.h) shows that engine's rank instead.
void set_log_rank(int rank, int world_size);
// The prefix this thread's lines get now; -1 for none.
int log_rank();

void log(LogLevel level, std::string_view message);

// Replaces the text format (`--log-format json`): returns the whole line,
// without the newline, for a message at `level` from `rank` (-1 when the
// job has one rank). An empty function restores the text format.
using LogFormatter = std::function<std::string(LogLevel level, int rank, std::string_view message)>;
void set_log_formatter(LogFormatter formatter);
inline void log_debug(std::string_view m) { log(LogLevel::kDebug, m); }
inline void log_info(std::string_view m) { log(LogLevel::kInfo, m); }
inline void log_warning(std::string_view m) { log(LogLevel::kWarning, m); }
inline void log_error(std::string_view m) { log(LogLevel::kError, m); }

}  // namespace dscore
