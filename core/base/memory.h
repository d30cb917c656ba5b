// Counted memory: every buffer the engine or a plugin (through host->alloc)
// takes is recorded by kind, use and tag, so a run can report what it holds
// and the ZeRO memory formulas can be checked against what was really
// allocated. The use is given at allocation; the tag is for people.
#pragma once

#include <dscore/plugin.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace dscore {

struct MemoryUsage {
  uint64_t current_bytes = 0;
  uint64_t peak_bytes = 0;
};

// What a buffer is for, in the rows of the ZeRO memory plan (zero/plan.h).
// Plugins allocate through host->alloc, whose ABI carries no use: their
// buffers are kOther, told apart by tag ("gpt activations").
enum class MemoryUse {
  kParameters,      // the model's parameters, as the model reads them
  kGradients,       // accumulated and reduced gradients
  kMaster,          // fp32 master weights
  kOptimizerState,  // the optimizer's state slots
  kBuffers,         // communication buckets, gathered parameters
  kActivations,
  kOther,  // batches, staging, plugin allocations
};
inline constexpr size_t kMemoryUseCount = 7;
const char* memory_use_name(MemoryUse use);                 // "parameters", "optimizer state", ...
using MemoryByUse = std::array<uint64_t, kMemoryUseCount>;  // current bytes, indexed by the use

// A ledger of live allocations by kind, use and tag. Thread-safe. Each host
// context (one per engine) keeps one for what its plugins allocate through
// host->alloc, and one the engine's own buffers count in: they go to the
// process ledger below, which also records each in the ledger of the engine
// whose thread allocates it (engine_scope.h).
class MemoryLedger {
 public:
  MemoryLedger();
  ~MemoryLedger();
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // Allocate `bytes` aligned to `alignment` (power of two; 0 means 64) of
  // the given kind, for `use`. Returns nullptr on failure. Pinned host memory is
  // ordinary host memory locked best-effort when no accelerator runtime is
  // present; device memory fails without one.
  void* allocate(size_t bytes, size_t alignment, dscore_memory_kind kind, MemoryUse use,
                 std::string_view tag);
  // Frees only what this ledger allocated (anything else, external records
  // included, is ignored).
  void release(void* ptr);

  // Records memory allocated elsewhere (a CUDA pool, cudaHostAlloc) so it
  // counts like the ledger's own: the ledger never frees it. The owner calls
  // forget_external() when it frees the memory. Recording a pointer that is
  // already recorded replaces the old record.
  void record_external(void* ptr, size_t bytes, dscore_memory_kind kind, MemoryUse use,
                       std::string_view tag);
  // Removes an external record (anything else is ignored).
  void forget_external(void* ptr);

  MemoryUsage usage(dscore_memory_kind kind) const;
  // Current bytes per tag, all kinds together.
  std::map<std::string, uint64_t> by_tag() const;
  // Current bytes per use, all kinds together.
  MemoryByUse by_use() const;

 private:
  friend MemoryLedger& process_memory();
  struct State;
  std::unique_ptr<State> state_;
};

// The process ledger: every engine's own buffers (partitions, buckets,
// batches). Process-wide because frees may come during exit and from any
// engine's threads; each record also counts in the ledger of the engine
// whose thread made it (EngineIdentity::ledger), until it is freed.
MemoryLedger& process_memory();

void* counted_alloc(size_t bytes, size_t alignment, dscore_memory_kind kind, MemoryUse use,
                    std::string_view tag);
void counted_free(void* ptr, dscore_memory_kind kind);

MemoryUsage memory_usage(dscore_memory_kind kind);
// Current bytes per tag, all kinds together.
std::map<std::string, uint64_t> memory_by_tag();
MemoryByUse memory_by_use();

// Owning handle for a counted buffer.
struct CountedFree {
  dscore_memory_kind kind = DSCORE_MEMORY_HOST;
  void operator()(void* p) const { counted_free(p, kind); }
};
using CountedBuffer = std::unique_ptr<void, CountedFree>;
CountedBuffer make_counted_buffer(size_t bytes, dscore_memory_kind kind, MemoryUse use,
                                  std::string_view tag);

}  // namespace dscore
