// Optimizer state on NVMe (ZeRO-Infinity, "offload_optimizer": {"device":
// "nvme"}): the owned space's fp32 master weights (16-bit models only; an
// fp32 model's master is the parameters it reads, which stay in memory)
// and every optimizer slot live in files under nvme_path/<job>/rank<R>/,
// one file per state. They are processed in tiles of sub_group_size
// elements through 1 + pipeline_read + pipeline_write tile buffers: while
// the optimizer updates tile k, tile k+1 is read (pipeline_read) and tile
// k-1 written (pipeline_write). With both off, tiles go read, update,
// write, one after the other.
//
// From a device whose memory the host does not address (a GPU; the CPU
// device with DSCORE_CPU_DEVICE_MEMORY=separate, which tests use), the
// state is staged (NvmeStateOptions::staging): the update runs on the host
// (on_host()), each tile's gradients come from the device into a host
// buffer of its tile buffer on a copy stream of the state's own, queued with
// the tile's reads (after the engine's compute stream), and each tile's new
// parameters go back through a ParamWriteBack (param_write_back.h). The
// fp32 master then has a file for fp32 models too, as in DeepSpeed: their
// parameters on the device are a copy of it.
//
// File layout: state s's values for elements [e, e + n) sit at byte
// e * elements_per_param * dtype size; every file is sized for
// round_up(owned, zero::kTileGranularity) elements, so every tile's
// transfer is aligned for O_DIRECT. The plan (core/zero/plan.h) counts the
// same files and tile buffers.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/offload/swapper.h"
#include "core/owned_state/owned_state.h"
#include "core/owned_state/param_write_back.h"

namespace dscore {

struct NvmeStateOptions {
  std::string folder;  // nvme_path/<job>/rank<R>: created, removed at the end
  int64_t sub_group_size = 0;
  bool pipeline_read = false;
  bool pipeline_write = false;
  // Set: staged through host buffers from the device's memory (above).
  std::optional<DeviceSide> staging;
};

class NvmeState final : public OwnedState {
 public:
  // Creates the files and writes the initial state: the master weights
  // through the model's init_param over `segments` (16-bit models; for fp32
  // models `fp32_master` is the strategy's parameters, which a staged state
  // copies into its file), the slots their declared initial values.
  static Result<std::unique_ptr<NvmeState>> create(offload::Swapper* swapper,
                                                   const NvmeStateOptions& options,
                                                   const std::vector<zero::StateSlot>& slots,
                                                   const std::vector<double>& initial_values,
                                                   int64_t owned, float* fp32_master,
                                                   const Model& model,
                                                   const std::vector<zero::OwnedSegment>& segments);
  ~NvmeState() override;

  Status for_each_tile(TileAccess access,
                       const std::function<Status(const StateTile&)>& visit) override;
  Status read(int state, int64_t first, int64_t count, void* dst) override;
  std::string describe() const override;
  bool on_host() const override { return options_.staging.has_value(); }
  int64_t transfer_bytes() const override;

  int64_t tile_elements() const { return tile_; }
  const offload::Swapper& swapper() const { return *swapper_; }

 private:
  struct File {
    std::string path;
    int number = -1;
    size_t value_bytes = 0;  // elements_per_param x dtype size: bytes per owned element
    int state = kMasterState;
  };
  struct Buffer {
    CountedBuffer memory;
    size_t bytes = 0;
    std::vector<char*> parts;  // per file: tile_ elements' values
    std::vector<offload::Swapper::Ticket> pending;
    device::Buffer grads;       // staged: the tile's gradients (grad dtype)
    device::EventPtr grads_in;  // staged: their copy
  };
  NvmeState() = default;
  Status create_staging();  // the copy stream, gradient tiles and write-back
  int64_t tile_count() const { return (owned_ + tile_ - 1) / tile_; }
  StateTile view(int64_t tile, Buffer& buffer) const;
  // Queue the reads (or writes) of `tile`'s values of every file; with
  // stage_grads_, a read also queues the copy of the tile's gradients.
  Status transfer(int64_t tile, Buffer& buffer, bool write);
  Status settle(Buffer& buffer);
  Status settle_all();
  // The walk; without read_tiles the visitor writes every value.
  Status walk(bool read_tiles, bool write_tiles,
              const std::function<Status(const StateTile&)>& visit);
  // A staged kUpdate or kStep walk: gradients in, the walk, parameters out.
  Status staged_update(TileAccess access, const std::function<Status(const StateTile&)>& visit);

  offload::Swapper* swapper_ = nullptr;  // the engine's; outlives this
  NvmeStateOptions options_;
  std::vector<zero::StateSlot> slots_;
  std::vector<File> files_;  // the master's first when it is on disk, then the slots
  std::vector<Buffer> buffers_;
  int64_t owned_ = 0;
  int64_t tile_ = 0;
  float* fp32_master_ = nullptr;  // fp32 models, not staged: the strategy's parameters
  // Staged (options_.staging):
  std::unique_ptr<device::Stream> copy_;
  ParamWriteBack write_back_;
  bool stage_grads_ = false;  // in a staged update walk
};

}  // namespace dscore
