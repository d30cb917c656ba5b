// Engine::load_checkpoint: every rank reads rank 0's model-states file
// (under checkpoint.use_node_local_storage, the copy on its node) for the
// training state and layout, then reads, from whichever files hold them,
// the fragments that cover the parameters it owns now — so any world size
// and stage can load any other's save. The ranks agree that every read
// succeeded before the collective refresh of the model's parameters.
#include <algorithm>
#include <vector>

#include <dscore/cpp/dtype.hpp>

#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/format.h"
#include "core/checkpoint/training_state.h"
#include "core/comm/agreement.h"
#include "core/engine/engine.h"
#include "core/zero/zero_memory.h"

namespace dscore {
namespace {

namespace ck = checkpoint;

// Elements [element, element + count) of `param` in `slot` (each
// `epp` values wide, as `dtype`) into `dst`, memory of the engine's device:
// read into bounded host staging, then uploaded on `stream`
// (core/zero/zero_memory.h), so the host never writes device memory.
Status read_into_device(ck::FragmentSet& set, const std::string& slot, const std::string& param,
                        int64_t element, int64_t count, uint32_t epp, dscore_dtype dtype, void* dst,
                        device::Device* device, device::Stream* stream) {
  constexpr int64_t kPieceValues = int64_t{1} << 20;
  const int64_t piece = std::max<int64_t>(kPieceValues / epp, 1);
  const size_t es = sdk::dtype_size(dtype) * epp;  // bytes per element
  std::vector<char> staging(static_cast<size_t>(std::min(count, piece)) * es);
  for (int64_t done = 0; done < count; done += piece) {
    const int64_t n = std::min(piece, count - done);
    DSCORE_RETURN_IF_ERROR(set.read(slot, param, element + done, n, epp, dtype, staging.data()));
    DSCORE_RETURN_IF_ERROR(zero::upload(device, stream,
                                        static_cast<char*>(dst) + static_cast<size_t>(done) * es,
                                        staging.data(), static_cast<size_t>(n) * es));
  }
  return Status::Ok();
}

}  // namespace

Result<LoadedCheckpoint> Engine::load_checkpoint(const std::string& dir,
                                                 const LoadCheckpointOptions& options) {
  EngineScope engine(host_->identity());
  DSCORE_RETURN_IF_ERROR(check_at_boundary("load_checkpoint"));
  DSCORE_RETURN_IF_ERROR(stream_->synchronize());
  Result<LoadedCheckpoint> local = read_checkpoint(dir, options);
  DSCORE_RETURN_IF_ERROR(comm::agree(*comm_, local.status()));
  // The model's copy of the parameters, from the loaded masters.
  DSCORE_RETURN_IF_ERROR(optimizer_->write_16bit_copy());
  DSCORE_RETURN_IF_ERROR(strategy_->after_update());
  if (rank() == 0)
    log_info("loaded checkpoint " + local->path + " (saved by " +
             std::to_string(local->saved_world_size) + " rank(s) at ZeRO stage " +
             std::to_string(local->saved_zero_stage) + ")");
  return local;
}

Result<LoadedCheckpoint> Engine::read_checkpoint(const std::string& dir,
                                                 const LoadCheckpointOptions& options) {
  DSCORE_ASSIGN_OR_RETURN(ck::CheckpointInfo info,
                          ck::open_checkpoint(dir, options.tag, /*node_part=*/true));
  const ck::FileHeader& header0 = info.header0;
  const ck::TrainingState& state = info.state;
  LoadedCheckpoint loaded;
  loaded.tag = info.tag;
  loaded.path = info.path;
  loaded.saved_world_size = header0.world_size;
  loaded.saved_zero_stage = header0.zero_stage;
  loaded.client_state = state.client_state;
  const std::vector<ck::SavedParam>& saved = state.params;

  // The saved parameters must be this model's.
  const auto& params = layout_.params();
  for (const ParamEntry& p : params) {
    auto it = std::find_if(saved.begin(), saved.end(),
                           [&](const ck::SavedParam& s) { return s.name == p.name; });
    if (it == saved.end())
      return failed_precondition(
          "checkpoint " + loaded.path + " has no parameter " + p.name +
          ": it was saved from a different model; check the \"model\" section");
    if (it->shape != p.whole_shape())
      return failed_precondition("checkpoint " + loaded.path + " has parameter " + p.name +
                                 " with shape " + ck::shape_text(it->shape) +
                                 " but the model's is " + ck::shape_text(p.whole_shape()) +
                                 ": the \"model\" section differs from the one that saved it");
  }
  // A pipeline stage holds part of the model: the whole one is compared.
  const size_t model_params = model_layout().params().size();
  if (saved.size() != model_params)
    return failed_precondition("checkpoint " + loaded.path + " has " +
                               std::to_string(saved.size()) + " parameters but the model has " +
                               std::to_string(model_params) +
                               ": it was saved from a different model");

  const bool weights_only = options.load_module_only || !options.load_optimizer_states;
  // A node-local save read on one node: the files here, each rank then
  // reading what it owns from them (an error naming the other hosts' files
  // where that is not enough).
  std::vector<std::string> names = weights_only ? state.model_files : state.optim_files;
  std::erase_if(names, [&](const std::string& n) {
    return std::find(info.absent.begin(), info.absent.end(), n) != info.absent.end();
  });
  const bool partial = names.size() < (weights_only ? state.model_files : state.optim_files).size();
  if (names.empty())
    return failed_precondition("checkpoint " + loaded.path + " on this node holds none of " +
                               info.absent_text() + "; " + info.absent_remedy());
  DSCORE_ASSIGN_OR_RETURN(ck::FragmentSet set, ck::FragmentSet::open(loaded.path, names));
  if (set.headers().front().checkpoint_id != header0.checkpoint_id)
    return data_loss(loaded.path + " mixes files of two saves: restore the folder from one save");

  const auto& segments = strategy_->owned_segments();
  const char* master_slot = weights_only ? ck::kParamSlot : ck::kMasterSlot;
  const auto check_complete = [&](const char* slot) {
    return partial ? Status::Ok() : set.check_complete(slot, saved);
  };
  DSCORE_RETURN_IF_ERROR(check_complete(master_slot));
  const std::vector<zero::StateSlot> slots = optimizer_->slots();
  if (!weights_only) {
    const std::vector<std::string> have = state.optimizer_slot_names();
    std::vector<std::string> want;
    for (const zero::StateSlot& slot : slots) want.push_back(slot.name);
    if (have != want)
      return failed_precondition(
          "checkpoint " + loaded.path + " has optimizer state [" + join(have, ", ") +
          "] but the configured optimizer declares [" + join(want, ", ") +
          "]: load with load_optimizer_states=false to take only the weights");
    for (const zero::StateSlot& slot : slots)
      DSCORE_RETURN_IF_ERROR(check_complete(slot.name.c_str()));
  }
  // Whole elements [whole, whole + n) of `name`, the owned elements from
  // `at` on: the master (or the weights), and the optimizer's slots. The
  // tile's memory is the device's (in memory) or host memory (NVMe tiles);
  // an upload serves both. The compute stream orders the copies after the
  // optimizer's work.
  const auto read_whole_run = [&](const std::string& name, int64_t whole, int64_t n, int64_t at,
                                  const StateTile& tile) -> Status {
    DSCORE_RETURN_IF_ERROR(read_into_device(set, master_slot, name, whole, n, 1, DSCORE_DTYPE_F32,
                                            tile.master + (at - tile.begin), device_.get(),
                                            compute_.get()));
    if (weights_only) return Status::Ok();
    for (size_t k = 0; k < slots.size(); ++k) {
      const size_t es = sdk::dtype_size(slots[k].dtype);
      const uint32_t epp = slots[k].elements_per_param;
      DSCORE_RETURN_IF_ERROR(read_into_device(
          set, slots[k].name, name, whole, n, epp, slots[k].dtype,
          static_cast<char*>(tile.slots[k]) + static_cast<size_t>(at - tile.begin) * epp * es,
          device_.get(), compute_.get()));
    }
    return Status::Ok();
  };
  // Tile by tile into wherever the state lives (memory or NVMe): each
  // segment's part inside the tile.
  DSCORE_RETURN_IF_ERROR(
      optimizer_->state().for_each_tile(TileAccess::kUpdate, [&](const StateTile& tile) -> Status {
        for (const zero::OwnedSegment& s : segments) {
          const int64_t a = std::max(s.offset, tile.begin);
          const int64_t b = std::min(s.offset + s.numel, tile.end);
          if (a >= b) continue;
          const ParamEntry& p = params[s.param];
          // The files hold whole tensors: a tensor-parallel part's elements
          // are read run by run (one run where not split).
          Status read = Status::Ok();
          p.for_each_whole_run(
              s.element + (a - s.offset), b - a, [&](int64_t local, int64_t whole, int64_t n) {
                if (read.ok())
                  read = read_whole_run(p.name, whole, n, s.offset + (local - s.element), tile);
              });
          if (partial && read.code() == DSCORE_NOT_FOUND)
            return failed_precondition(
                "checkpoint " + loaded.path + " was saved with checkpoint.use_node_local_storage " +
                "and this rank needs shards that this node (" + nodes_.host_of(rank()) +
                ") does not hold: it lacks " + info.absent_text() + " (" + read.message() + "); " +
                info.absent_remedy());
          DSCORE_RETURN_IF_ERROR(read);
        }
        return Status::Ok();
      }));
  if (!weights_only) {
    if (optimizer_->instance().has_extra_state()) {
      if (header0.world_size != world_size())
        return failed_precondition(
            "optimizer " + optimizer_->instance().info().name +
            " keeps per-rank state that was "
            "saved by " +
            std::to_string(header0.world_size) +
            " rank(s) and cannot be split "
            "across " +
            std::to_string(world_size()) +
            ": load with load_optimizer_states=false, or at the saved world size");
      const std::string mine_name = state.optim_files[static_cast<size_t>(rank())];
      const size_t at =
          static_cast<size_t>(std::find(names.begin(), names.end(), mine_name) - names.begin());
      if (at == names.size()) return not_found(loaded.path + " has no " + mine_name);
      const ck::SafetensorsReader& mine = set.files()[at];
      const ck::TensorInfo* extra = mine.find(ck::kOptimizerExtraTensor);
      if (extra == nullptr) return data_loss(mine.path() + " has no " + ck::kOptimizerExtraTensor);
      std::string bytes(extra->bytes, '\0');
      DSCORE_RETURN_IF_ERROR(mine.read_verified(*extra, bytes.data()));
      DSCORE_RETURN_IF_ERROR(optimizer_->instance().load_extra_state(bytes));
    }
  }
  if (!options.load_module_only)
    DSCORE_RETURN_IF_ERROR(restore_training_state(state, loaded.path, options, header0.world_size));
  if (plugin_host::SchedulerInstance* sched = schedule_->scheduler();
      !options.load_module_only && options.load_lr_scheduler_states && sched != nullptr &&
      sched->has_extra_state()) {
    const ck::SafetensorsReader& model0 = info.model0;
    const ck::TensorInfo* extra = model0.find(ck::kSchedulerExtraTensor);
    if (extra == nullptr) return data_loss(model0.path() + " has no " + ck::kSchedulerExtraTensor);
    std::string bytes(extra->bytes, '\0');
    DSCORE_RETURN_IF_ERROR(model0.read_verified(*extra, bytes.data()));
    DSCORE_RETURN_IF_ERROR(sched->load_extra_state(bytes));
  }
  return loaded;
}

Status Engine::restore_training_state(const ck::TrainingState& state, const std::string& folder,
                                      const LoadCheckpointOptions& options, int saved_world) {
  global_steps_ = state.counters.global_steps;
  global_samples_ = state.counters.global_samples;
  skipped_steps_ = state.counters.skipped_steps;
  micro_steps_ = global_steps_ * config_.batch.gradient_accumulation_steps;
  if (config_.fp16.enabled && scaler_.is_dynamic() && state.loss_scaler.dynamic) {
    const auto& ls = state.loss_scaler;
    scaler_.restore({ls.scale, ls.iteration, ls.last_overflow_iteration, ls.hysteresis_left});
  }
  if (options.load_lr_scheduler_states) schedule_->set_iteration(state.lr_last_batch_iteration);
  const int64_t saved_batch = state.train_batch_size;
  if (saved_batch != config_.batch.train_batch_size && rank() == 0)
    log_warning("checkpoint " + folder + " was trained with train_batch_size " +
                std::to_string(saved_batch) + " (at " + std::to_string(saved_world) +
                " rank(s)); this run uses " + std::to_string(config_.batch.train_batch_size) +
                ", so it reads different batches than an "
                "uninterrupted run would");
  return Status::Ok();
}

}  // namespace dscore
