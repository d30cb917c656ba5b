// Which engine the work on a thread is for, so that the process-wide
// services answer per engine: the rank a log line is prefixed with
// (logging.h) and the ledger that counts the engine's own allocations
// beside the process's (memory.h). Two engines in one process (ranks as
// threads) each log their own rank and measure their own memory.
//
// The engine enters its scope in each of its calls (EngineScope); a thread
// it starts (a stream's worker, the swapper's I/O thread) takes the scope
// of the thread that started it: capture current() there, enter it in the
// new thread. Outside any scope the process-wide values apply.
#pragma once

#include <atomic>
#include <memory>

namespace dscore {

class MemoryLedger;

struct EngineIdentity {
  std::atomic<int> log_rank{-1};         // the rank its log lines show; -1: none (one rank)
  std::shared_ptr<MemoryLedger> ledger;  // the engine's own allocations
};

class EngineScope {
 public:
  // Enters `identity` (nullptr: none) on this thread until destroyed.
  explicit EngineScope(std::shared_ptr<const EngineIdentity> identity);
  ~EngineScope();
  EngineScope(const EngineScope&) = delete;
  EngineScope& operator=(const EngineScope&) = delete;

  // The identity this thread works for; nullptr outside any scope.
  static const std::shared_ptr<const EngineIdentity>& current();

 private:
  std::shared_ptr<const EngineIdentity> previous_;
};

}  // namespace dscore
