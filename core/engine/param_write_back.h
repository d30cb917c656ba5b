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
#pragma once

#include "core/engine/owned_state.h"

namespace dscore {

class ParamWriteBack {
 public:
  ParamWriteBack() = default;
  // Allocates the staging tiles (host memory, pinned with side.pinned).
  static Result<ParamWriteBack> create(const DeviceSide& side, device::Stream* copy,
                                       int64_t tile_elements, bool stage_fp32);

  // New values of owned elements [begin, begin + count), count <= the tile.
  Status write(int64_t begin, int64_t count, const float* values);
  // Forget the copies in flight once the caller has synchronised `copy`.
  void release();
  // The staging tiles' bytes.
  int64_t bytes() const;

 private:
  struct Staging {
    device::Buffer values;  // a tile in the model's dtype
    device::EventPtr out;   // its last copy
  };
  DeviceSide side_;
  device::Stream* copy_ = nullptr;
  Staging staging_[2];
  int next_ = 0;
  int64_t tile_ = 0;
};

}  // namespace dscore
