// ZeRO-Offload ("offload_optimizer": {"device": "cpu"} at stages 1-3): the
// owned space's fp32 master weights and the optimizer's slots live in host
// memory (page-locked with pin_memory) and the update runs on the host,
// whatever the engine's device.
//
// The gradients come to a host copy of the owned gradients as the
// strategy reduces them: in the boundary's micro-step it reports each range
// of owned gradients final with the event of its reduction
// (zero::ReducedGradientSink), and the state queues that range's
// device-to-host copy on a copy stream of its own after the event, so the
// copies run beside the rest of backward. The update then copies what was
// not reported (padding, a strategy that reports nothing), after the
// engine's compute stream, and walks the owned space in tiles
// (zero::offload_tile_elements), in the order their gradients arrive, each
// once its own copies are done (an event per tile and copy), so the update
// of one tile overlaps the copies of the next. The optimizer updates a tile
// on the host while the previous tile's new parameters, in the model's
// dtype in one of two staging tiles, go to where the model reads them on the
// copy stream. The walk ends once every copy is done, so the next forward
// and the gradient zeroing see the new parameters. On the CPU device the
// copies are memcpys on the stream's worker, so every ordering rule above
// runs in CI (asynchronous streams, TSan).
//
// For fp32 models the parameters the model reads (the strategy's owned
// master) are a copy of the host master; for 16-bit models the strategy
// keeps no fp32 master at all (ZeroContext::master_elsewhere).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/owned_state/owned_state.h"
#include "core/owned_state/param_write_back.h"

namespace dscore {

struct HostOffloadOptions {
  DeviceSide side;            // the gradients, the parameters, pin_memory
  int64_t tile_elements = 0;  // zero::offload_tile_elements
  int rank = 0;               // for the log
  // The state holds owned elements [first, first + owned): all of them, or
  // the offloaded rest of a partial offload (partial_offload_state.h).
  // Tiles, reads and reported ranges are in owned-space elements.
  int64_t first = 0;
};

class HostOffloadState final : public OwnedState {
 public:
  // Allocates the master, slots, host gradients and staging in host memory
  // for `owned` elements from options.first. The master's initial values:
  // 16-bit models through the model's init_param over `segments`, fp32
  // models a copy of `fp32_params` (the strategy's initialised owned
  // parameters from owned element 0, device memory). Slots hold their
  // declared initial values.
  static Result<std::unique_ptr<HostOffloadState>> create(
      const HostOffloadOptions& options, const std::vector<zero::StateSlot>& slots,
      const std::vector<double>& initial_values, int64_t owned, const float* fp32_params,
      const Model& model, const std::vector<zero::OwnedSegment>& segments);
  ~HostOffloadState() override;

  // kRead: one tile of the whole owned space, no gradients. kUpdate and
  // kStep: the pipeline of the file comment; each tile's parameters are written to the
  // model after its visit (the state refreshes the model's copy itself).
  Status for_each_tile(TileAccess access,
                       const std::function<Status(const StateTile&)>& visit) override;
  Status read(int state, int64_t first, int64_t count, void* dst) override;
  std::string describe() const override;
  bool on_host() const override { return true; }
  int64_t transfer_bytes() const override;
  void boundary_micro_step() override {
    reported_.clear();
    reported_elements_ = 0;
    for (TileGrads& tile : tile_grads_) tile = TileGrads{};
  }
  void owned_grads_final(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                         const device::EventPtr& ready) override;

 private:
  HostOffloadState() = default;
  int64_t tile_count() const { return (owned_ + tile_ - 1) / tile_; }
  // Queue the copy of owned gradients [begin, end) to the host (elements
  // of this state: owned element first_ + begin on), a copy and an event
  // per tile it touches.
  void copy_grads(int64_t begin, int64_t end);
  // Queue the copies of every owned gradient not reported this cycle.
  void copy_unreported_grads();
  Status update_walk(TileAccess access, const std::function<Status(const StateTile&)>& visit);

  HostOffloadOptions options_;
  std::unique_ptr<device::Stream> copy_;
  std::vector<zero::StateSlot> slots_;
  device::Buffer master_;
  std::vector<device::Buffer> slot_buffers_;
  device::Buffer grads_;  // (owned) grad_dtype: the host copy of the owned gradients
  ParamWriteBack write_back_;
  // Per tile, this update cycle: the event of the last copy of its
  // gradients, and that copy's place in the order of copies.
  struct TileGrads {
    device::EventPtr copied;
    int64_t order = 0;
  };
  std::vector<TileGrads> tile_grads_;
  int64_t copies_ = 0;  // copies queued so far (TileGrads::order)
  // Ranges of this state's gradients copied (or queued) since the
  // boundary's micro-step began.
  std::vector<std::pair<int64_t, int64_t>> reported_;
  int64_t reported_elements_ = 0;  // reported since the boundary's micro-step began
  bool logged_ = false;            // the first update's line
  int64_t first_ = 0;              // options_.first
  int64_t owned_ = 0;              // elements of this state
  int64_t tile_ = 0;
};

}  // namespace dscore
