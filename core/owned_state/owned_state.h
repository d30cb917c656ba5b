// Where this rank's optimizer state lives: the fp32 master weights of the
// owned space (zero_strategy.h) and the optimizer's declared state slots.
// The optimizer, checkpoints and the 16-bit refresh reach it in tiles, so
// the same code runs whether it is all in the device's memory
// (InMemoryState: one tile), in host memory apart from the device
// (ZeRO-Offload, host_offload_state.h) or streamed through NVMe files a few
// tiles at a time (nvme_state.h).
//
// Master weights: for fp32 models the master IS the parameters the model
// reads (the strategy's memory) and every store points into it; for 16-bit
// models the store holds it (InMemoryState borrows the strategy's buffer,
// NvmeState keeps it in a file).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/memory.h"
#include "core/base/status.h"
#include "core/device/device.h"
#include "core/model/model.h"
#include "core/zero/plan.h"
#include "core/zero/reduced_gradient_sink.h"
#include "core/zero/zero_strategy.h"

namespace dscore {

// The owned-space elements [begin, end) of every state.
struct StateTile {
  int64_t begin = 0;
  int64_t end = 0;
  float* master = nullptr;   // master element `begin`
  std::vector<void*> slots;  // slot k's value begin * elements_per_param
  // The tile's gradients (grad dtype, element `begin`) where the update
  // runs, when the state stages them (host_offload_state.h) or the strategy
  // has no single buffer of them (split_owned_state.h); nullptr: the
  // strategy's owned gradients.
  void* grads = nullptr;
  // Where the visitor writes every element of the tile's new parameters in
  // the model's 16-bit dtype (element `begin`), so the optimizer writes them
  // in the pass that updates the master: on a state that sends them to the
  // model from host staging (ParamWriteBack, kStep), or the strategy
  // domain's own 16-bit parameters (split_owned_state.h, every walk).
  // nullptr: the strategy's, or the state converts them from the master
  // itself (fp32 models, kUpdate).
  void* params16 = nullptr;
};

// For a state that updates on the host while the engine computes on a
// device whose memory the host does not address (a GPU): where the
// update's gradients come from and where its new parameters go, all in the
// device's memory and reached only through copies on a stream.
struct DeviceSide {
  device::Device* device = nullptr;   // the engine's
  device::Stream* compute = nullptr;  // the engine's compute stream
  const void* grads = nullptr;        // the strategy's owned gradients
  dscore_dtype grad_dtype = DSCORE_DTYPE_F32;
  void* model_params = nullptr;  // the owned parameters the model reads;
                                 // nullptr: through param_store
  dscore_dtype model_dtype = DSCORE_DTYPE_F32;
  // Stage 3 with its parameters on NVMe: the strategy that takes new values
  // of owned elements from host memory (ZeroStrategy::store_params16).
  zero::ZeroStrategy* param_store = nullptr;
  bool pinned = false;  // offload_optimizer.pin_memory: page-locked host buffers
};

enum class TileAccess {
  kRead,    // the tiles are read; changes are not kept
  kUpdate,  // read, changed by the visitor, kept
  kStep,    // the optimizer's update: kUpdate, and the visitor fills StateTile::params16
};

// Which state read() addresses: the master weights or slot k (0-based).
inline constexpr int kMasterState = -1;

// The state is where ZeRO hands the boundary's reduced gradients
// (reduced_gradient_sink.h): a state on the host copies them as they come.
class OwnedState : public zero::ReducedGradientSink {
 public:
  virtual ~OwnedState() = default;

  // Visit every tile in owned-space order. A tile's pointers are valid only
  // during its call; an error from the visitor stops the walk.
  virtual Status for_each_tile(TileAccess access,
                               const std::function<Status(const StateTile&)>& visit) = 0;
  // Values [first, first + count) of a state (slot values count
  // elements_per_param per element) into dst, in the state's dtype.
  virtual Status read(int state, int64_t first, int64_t count, void* dst) = 0;
  // One line for the log: where the state lives.
  virtual std::string describe() const = 0;
  // The states the optimizer steps, one after the other, each wholly on the
  // host (on_host()) or with the parameters: this one, or the two parts of
  // a partial offload (partial_offload_state.h).
  virtual std::vector<OwnedState*> parts() { return {this}; }
  // Whether the state lives in host memory apart from the engine's device
  // (ZeRO-Offload): the update runs on the host on the gradients its tiles
  // stage, and every kUpdate or kStep walk writes each tile's parameters
  // to where the model reads them.
  virtual bool on_host() const { return false; }
  // Host memory the state holds for moving data (NVMe tile buffers;
  // ZeRO-Offload's host gradients and staging), counted with the optimizer
  // state.
  virtual int64_t transfer_bytes() const { return 0; }
  // For a state on the host: the accumulation boundary's micro-step
  // begins; owned_grads_final (zero::ReducedGradientSink) follows as its
  // reductions finish. Other states ignore both.
  virtual void boundary_micro_step() {}
  void owned_grads_final(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                         const device::EventPtr& ready) override {
    (void)ranges, (void)ready;
  }
};

// Everything in memory: the strategy's master, one buffer per slot, both
// in the engine's device memory (zero_memory.h). Tiles hand out those
// pointers; read() copies through the host on `stream`.
class InMemoryState final : public OwnedState {
 public:
  // Allocates the slots from `device` (initial values as declared, written
  // through host staging); `master` is the strategy's owned master.
  static Result<std::unique_ptr<InMemoryState>> create(const std::vector<zero::StateSlot>& slots,
                                                       const std::vector<double>& initial_values,
                                                       int64_t owned, float* master,
                                                       device::Device* device = nullptr,
                                                       device::Stream* stream = nullptr);
  Status for_each_tile(TileAccess access,
                       const std::function<Status(const StateTile&)>& visit) override;
  Status read(int state, int64_t first, int64_t count, void* dst) override;
  std::string describe() const override { return "in host memory"; }

 private:
  InMemoryState() = default;
  std::vector<zero::StateSlot> slots_;
  std::vector<device::Buffer> buffers_;
  device::Device* device_ = nullptr;
  device::Stream* stream_ = nullptr;
  int64_t owned_ = 0;
  float* master_ = nullptr;
};

// Fill `count` values of `dtype` at dst with `value` (slot initial values).
void fill_value(void* dst, dscore_dtype dtype, int64_t count, double value);

}  // namespace dscore
