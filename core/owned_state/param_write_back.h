// The last leg of an update that runs on the host for a state apart from
// the engine's device (ZeRO-Offload, NVMe offload from a GPU): each tile's
// new fp32 values are converted to the model's dtype into one of two
// staging tiles and copied to where the model reads them on the state's
// copy stream, so the host updates the next tile while the copy runs. A
// staging tile is reused only once its previous copy is done.
//
// fp32 values go straight from the caller's tile unless `stage_fp32`: a
// caller whose tile memory is refilled before the copy ends (NVMe tile
// buffers) stages them too.
//
// In the optimizer's walk (TileAccess::kStep) a 16-bit model's tile skips
// the conversion: next_staging() hands out the staging tile, the optimizer
// writes the new 16-bit parameters into it as it updates the master
// (StateTile::params16), and send() copies it out.
#pragma once

#include <functional>

#include "core/owned_state/owned_state.h"

namespace dscore {

class ParamWriteBack {
 public:
  ParamWriteBack() = default;
  // Allocates the staging tiles (host memory, pinned with side.pinned).
  static Result<ParamWriteBack> create(const DeviceSide& side, device::Stream* copy,
                                       int64_t tile_elements, bool stage_fp32);

  // New values of owned elements [begin, begin + count), count <= the tile.
  Status write(int64_t begin, int64_t count, const float* values);
  // The next staging tile, once its previous copy is out, for the caller to
  // fill with a tile of new parameters in the model's dtype; nullptr for an
  // fp32 model (nothing to convert: write() them).
  Result<void*> next_staging();
  // Send what the caller wrote into the tile next_staging() handed out:
  // owned elements [begin, begin + count), count <= the tile.
  Status send(int64_t begin, int64_t count);
  // One tile of an update walk: visit it, then send its new parameters.
  // With kStep a 16-bit model's are what the visitor wrote into the staging
  // (tile->params16, set here); otherwise write() converts the master's.
  Status visit_then_send(TileAccess access, StateTile* tile,
                         const std::function<Status(const StateTile&)>& visit);
  // Forget the copies in flight once the caller has synchronised `copy`.
  void release();
  // The staging tiles' bytes.
  int64_t bytes() const;

 private:
  struct Staging {
    device::Buffer values;  // a tile in the model's dtype
    device::EventPtr out;   // its last copy
  };
  // The staging tile for the next write or next_staging(); its index.
  int take_staging();
  // Copy `count` values of the model's dtype at `from` to owned element
  // `begin`; `staging` (or nullptr) records the copy's event.
  Status copy_out(int64_t begin, int64_t count, const void* from, Staging* staging);

  DeviceSide side_;
  device::Stream* copy_ = nullptr;
  Staging staging_[2];
  int handed_out_ = -1;  // the index next_staging() handed out, until send()
  int next_ = 0;
  int64_t tile_ = 0;
};

}  // namespace dscore
