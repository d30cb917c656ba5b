// The optimizer state of a run whose 16-bit parameters are the master
// (DeepSpeed's bf16_master_weights_and_grads at ZeRO 1-3): no fp32 copy of
// the weights, and with bf16_optimizer_states the declared slots stored in
// bf16 too. The optimizer still computes in fp32, as DeepSpeed's does on
// bf16 tensors: each tile of the owned space is widened into fp32 buffers
// (the master from the parameters, the slots from their storage), visited,
// and, for kUpdate and kStep, narrowed back (round to nearest even). The
// optimizer writes the tile's new parameters itself (StateTile::params16:
// the parameters), which is the master's narrowing.
//
// In memory the model reads on the host (the CPU engine): the parameters
// are the strategy's owned 16-bit parameters.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/owned_state/owned_state.h"
#include "core/tensor/host_buffer.h"

namespace dscore {

class LowPrecisionMasterState final : public OwnedState {
 public:
  // `params16`: the owned 16-bit parameters (model_dtype), owned elements;
  // `state_dtype`: the slots' storage (fp32, or bf16 for fp32-declared
  // slots); `tile_elements`: the fp32 buffers' size (plan.h
  // low_precision_tile_elements).
  static Result<std::unique_ptr<LowPrecisionMasterState>> create(
      const std::vector<zero::StateSlot>& slots, const std::vector<double>& initial_values,
      int64_t owned, void* params16, dscore_dtype model_dtype, dscore_dtype state_dtype,
      int64_t tile_elements);

  Status for_each_tile(TileAccess access,
                       const std::function<Status(const StateTile&)>& visit) override;
  // The master and the slots in their declared dtype (fp32), widened.
  Status read(int state, int64_t first, int64_t count, void* dst) override;
  std::string describe() const override;

 private:
  LowPrecisionMasterState() = default;
  // Slot k's storage dtype.
  dscore_dtype stored(size_t k) const;

  std::vector<zero::StateSlot> slots_;
  std::vector<CountedBuffer> storage_;  // per slot
  std::vector<CountedBuffer> wide_;     // per slot stored narrower: its fp32 tile
  CountedBuffer master_;                // the fp32 tile of the master
  int64_t owned_ = 0;
  int64_t tile_ = 0;
  void* params16_ = nullptr;
  dscore_dtype model_dtype_ = DSCORE_DTYPE_BF16;
  dscore_dtype state_dtype_ = DSCORE_DTYPE_F32;
};

}  // namespace dscore
