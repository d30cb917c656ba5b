// ZeRO-Offload ("offload_optimizer": {"device": "cpu"} at stages 1-3): the
// owned space's fp32 master weights and the optimizer's slots live in host
// memory (page-locked with pin_memory) and the update runs on the host,
// whatever the engine's device.
//
// An update walks the owned space in tiles (zero::offload_tile_elements)
// through two staging tiles. On a copy stream of its own the state copies
// tile t+1's gradients from the device into staging while the optimizer
// updates tile t on the host, and copies tile t's new parameters (converted
// to the model's dtype on the host) to where the model reads them while the
// optimizer updates tile t+1. The copy stream starts after the engine's
// compute stream (the reduced gradients are final there) and the walk ends
// once every copy is done, so the next step's reads and the gradient zeroing
// see the new parameters. On the CPU device the copies are memcpys on the
// stream's worker, so every ordering rule above runs in CI (asynchronous
// streams, TSan).
//
// For fp32 models the parameters the model reads (the strategy's owned
// master) are a copy of the host master; for 16-bit models the strategy
// keeps no fp32 master at all (ZeroContext::master_elsewhere).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/owned_state.h"

namespace dscore {

struct HostOffloadOptions {
  device::Device* device = nullptr;   // the engine's
  device::Stream* compute = nullptr;  // the engine's compute stream
  int64_t tile_elements = 0;          // zero::offload_tile_elements
  const void* grads = nullptr;        // the strategy's owned gradients (device memory)
  dscore_dtype grad_dtype = DSCORE_DTYPE_F32;
  void* model_params = nullptr;  // the owned parameters the model reads (device memory);
                                 // nullptr: through store_params below
  dscore_dtype model_dtype = DSCORE_DTYPE_F32;
  bool pinned = false;  // offload_optimizer.pin_memory: page-locked host memory
  // Stage 3 with its parameters on NVMe: new values of owned elements
  // [begin, begin + count) in model_dtype, from host memory.
  std::function<Status(int64_t begin, int64_t count, const void* values)> store_params;
};

class HostOffloadState final : public OwnedState {
 public:
  // Allocates the master, slots and staging in host memory. The master's initial
  // values: 16-bit models through the model's init_param over `segments`,
  // fp32 models a copy of `fp32_params` (the strategy's initialised owned
  // parameters, device memory). Slots hold their declared initial values.
  static Result<std::unique_ptr<HostOffloadState>> create(
      const HostOffloadOptions& options, const std::vector<zero::StateSlot>& slots,
      const std::vector<double>& initial_values, int64_t owned, const float* fp32_params,
      const Model& model, const std::vector<zero::OwnedSegment>& segments);
  ~HostOffloadState() override;

  // kRead: one tile of the whole owned space, no gradients. kUpdate: the
  // pipeline of the file comment; each tile's parameters are written to the
  // model after its visit (the state refreshes the model's copy itself).
  Status for_each_tile(TileAccess access,
                       const std::function<Status(const StateTile&)>& visit) override;
  Status read(int state, int64_t first, int64_t count, void* dst) override;
  std::string describe() const override;
  bool on_host() const override { return true; }
  int64_t tile_buffer_bytes() const override;

 private:
  struct Staging {
    device::Buffer grads;   // tile_ gradients
    device::Buffer params;  // tile_ parameters in the model's dtype (16-bit models)
    device::EventPtr grads_in, params_out;
  };
  HostOffloadState() = default;
  int64_t tile_count() const { return (owned_ + tile_ - 1) / tile_; }
  void fetch_grads(int64_t tile, Staging& staging);
  Status write_params(int64_t tile, Staging& staging);
  Status update_walk(const std::function<Status(const StateTile&)>& visit);

  HostOffloadOptions options_;
  std::unique_ptr<device::Stream> copy_;
  std::vector<zero::StateSlot> slots_;
  device::Buffer master_;
  std::vector<device::Buffer> slot_buffers_;
  Staging staging_[2];
  int64_t owned_ = 0;
  int64_t tile_ = 0;
};

}  // namespace dscore
