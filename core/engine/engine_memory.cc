// The engine's memory: its plan (zero::make_plan for this rank, with the
// pipeline executor's buffers, the model's activations and the process)
// and what it allocated by use (its host context's ledger), which
// memory_breakdown prints side by side.
#include "core/engine/engine.h"

namespace dscore {

zero::ZeroPlan Engine::plan() const {
  // ZeRO partitions over its group: the ranks holding the same part of the
  // model (a pipeline stage's, a tensor-parallel part's data- and
  // sequence-parallel ranks); under expert parallelism the experts' over
  // their expert-data-parallel ranks.
  zero::ZeroPlan plan =
      expert_parallel_size() > 1
          ? zero::make_expert_parallel_plan(
                config_, placement_, layout_, optimizer_->slots(), zero_group().world_size(),
                zero_group().rank(), expert_data_group().world_size(), expert_data_group().rank())
          : zero::make_plan(config_, placement_, layout_, optimizer_->slots(),
                            zero_group().world_size(), zero_group().rank());
  plan.rank = comm_->rank();
  plan.world = comm_->world_size();
  plan.memory.buffers += static_cast<int64_t>(pipe_memory_);
  zero::add_process_memory(process_memory_, &plan);
  return plan;
}

zero::MemoryPlan Engine::measured_memory() const {
  // What the strategy and the optimizer runner allocated, by the use they
  // gave: this engine's own ledger (its host context's), not the process's.
  const MemoryByUse bytes = host_->engine_memory().by_use();
  auto of = [&](MemoryUse use) { return static_cast<int64_t>(bytes[static_cast<size_t>(use)]); };
  zero::MemoryPlan m;
  m.parameters = of(MemoryUse::kParameters);
  m.gradients = of(MemoryUse::kGradients);
  m.master = of(MemoryUse::kMaster);
  m.optimizer = of(MemoryUse::kOptimizerState);
  m.buffers = of(MemoryUse::kBuffers);
  // The tile buffers of NVMe offload and ZeRO-Offload's host gradients and
  // staging are a row of their own in the plan.
  m.offload_tiles = optimizer_->state().transfer_bytes();
  m.optimizer -= m.offload_tiles;
  return m;
}

}  // namespace dscore
