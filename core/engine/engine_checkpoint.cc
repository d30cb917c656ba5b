// Engine::save_checkpoint and load_checkpoint: which bytes go where is
// core/checkpoint/format.h; this file is the protocol between ranks.
//
// Save: every rank agrees on rank 0's tag (checkpoint.tag_validation),
// rank 0 makes <dir>/<tag>.partial/, every rank writes its files there
// durably, all ranks agree that all succeeded, then rank 0 moves the folder
// to <dir>/<tag> (exchanging it with an older save of the same tag) and
// writes <dir>/latest. A crash or a failure anywhere before that leaves
// the previous checkpoint and `latest` as they were.
//
// Load: every rank reads rank 0's model-states file for the training state
// and layout, then reads, from whichever files hold them, the fragments
// that cover the parameters it owns now — so any world size and stage can
// load any other's save. The ranks agree that every read succeeded before
// the collective refresh of the model's parameters.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include <dscore/cpp/dtype.hpp>

#include "core/base/failpoint.h"
#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/checksum.h"
#include "core/checkpoint/durable_file.h"
#include "core/checkpoint/format.h"
#include "core/checkpoint/training_state.h"
#include "core/comm/agreement.h"
#include "core/engine/engine.h"
#include "core/zero/zero_memory.h"

#ifndef DSCORE_VERSION
#define DSCORE_VERSION "unknown"
#endif

namespace dscore {
namespace {

namespace ck = checkpoint;

constexpr size_t kMaxTagBytes = 256;

std::string random_id() {
  std::random_device device;
  const uint64_t a = (static_cast<uint64_t>(device()) << 32) ^ device();
  const uint64_t b =
      static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  return ck::format_checksum(a ^ (b * 0x9e3779b97f4a7c15ull)).substr(5);
}

Status publish(const std::string& dir, const std::string& tag, const std::string& staging,
               bool save_latest, int rank) {
  bool exchanged = false;
  DSCORE_RETURN_IF_ERROR(ck::rename_or_exchange(staging, dir + "/" + tag, &exchanged));
  DSCORE_RETURN_IF_ERROR(ck::sync_folder(dir));
  failpoint("checkpoint.before_latest", rank);
  if (save_latest) DSCORE_RETURN_IF_ERROR(ck::write_file_durably(dir + "/" + ck::kLatestName, tag));
  if (exchanged) DSCORE_RETURN_IF_ERROR(ck::remove_tree(staging));  // the older save of this tag
  return Status::Ok();
}

// Leftover staging folders of saves that never completed.
Status prepare_staging(const std::string& dir, const std::string& staging) {
  DSCORE_RETURN_IF_ERROR(ck::make_folders(dir));
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.size() > 8 &&
        name.compare(name.size() - 8, 8, ".partial") == 0)
      DSCORE_RETURN_IF_ERROR(ck::remove_tree(entry.path().string()));
  }
  if (ec) return ck::file_error("cannot list", dir, ec.value());
  return ck::make_folders(staging);
}

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

// ---------------------------------------------------------------- save

Status Engine::check_at_boundary(const char* what) const {
  const int64_t gas = config_.batch.gradient_accumulation_steps;
  if (micro_steps_ % gas == 0) return Status::Ok();
  return failed_precondition(std::string(what) +
                             " in the middle of a gradient accumulation cycle (micro step " +
                             std::to_string(micro_steps_ % gas) + " of " + std::to_string(gas) +
                             "): call it after the step() that completes the cycle");
}

Result<std::string> Engine::agree_on_tag(const std::string& wanted) {
  DSCORE_ASSIGN_OR_RETURN(std::string tag, comm::broadcast_string(*comm_, wanted, kMaxTagBytes));
  const std::string& mode = config_.checkpoint.tag_validation;
  if (mode != "IGNORE") {
    const Status mine =
        tag == wanted ? Status::Ok()
                      : invalid_argument("its tag is \"" + wanted + "\", rank 0's \"" + tag + "\"");
    const Status all = comm::agree(*comm_, mine);
    if (!all.ok() && mode == "FAIL")
      return failed_precondition(
          "checkpoint tags differ across ranks (" + all.message() +
          ") and checkpoint.tag_validation is FAIL: pass the same tag on every rank");
    if (!all.ok() && rank() == 0)
      log_warning("checkpoint tags differ across ranks (" + all.message() +
                  "); saving under rank 0's tag \"" + tag + "\" (checkpoint.tag_validation WARN)");
  }
  DSCORE_RETURN_IF_ERROR(ck::check_tag(tag));
  return tag;
}

Status Engine::save_checkpoint(const std::string& dir, const SaveCheckpointOptions& options) {
  EngineScope engine(host_->identity());
  DSCORE_RETURN_IF_ERROR(check_at_boundary("save_checkpoint"));
  if (dir.empty()) return invalid_argument("save_checkpoint needs a folder");
  DSCORE_RETURN_IF_ERROR(stream_->synchronize());
  DSCORE_ASSIGN_OR_RETURN(
      std::string tag,
      agree_on_tag(options.tag.empty() ? ck::default_tag(global_steps_) : options.tag));
  DSCORE_ASSIGN_OR_RETURN(std::string id, comm::broadcast_string(*comm_, random_id(), 64));
  const std::string staging = dir + "/" + tag + ".partial";
  const std::string where = "checkpoint " + tag + " in " + dir;
  const Status prepared = rank() == 0 ? prepare_staging(dir, staging) : Status::Ok();
  DSCORE_RETURN_IF_ERROR(comm::agree(*comm_, prepared).with_context("cannot save " + where));
  const Status written =
      comm::agree(*comm_, write_checkpoint_files(staging, tag, id, options.client_state));
  if (!written.ok()) {
    if (rank() == 0) (void)ck::remove_tree(staging);
    return Status(written.code(), "cannot save " + where + ": " + written.message() +
                                      "; the previous checkpoint and " + dir +
                                      "/latest are unchanged");
  }
  failpoint("checkpoint.before_publish", rank());
  const Status published =
      rank() == 0 ? publish(dir, tag, staging, options.save_latest, 0) : Status::Ok();
  DSCORE_RETURN_IF_ERROR(comm::agree(*comm_, published).with_context("cannot publish " + where));
  if (rank() == 0) log_info("saved " + where);
  return Status::Ok();
}

// The model states file rank `r` writes (when it writes one).
std::string Engine::model_file_of(int r) const {
  const comm::ParallelGrid& grid = topology_->grid();
  const int part = grid.rank_in_group(comm::groups::kModel, r);
  const int pipe = grid.rank_in_group(comm::groups::kPipe, r);
  if (pipe > 0) return ck::pipe_model_states_name(pipe, part, tensor_parallel_size());
  if (placement_.stage < 3 && grid.rank_in_group(comm::groups::kZero, r) != 0)
    return ck::expert_model_states_name(grid.rank_in_group(comm::groups::kExpert, r));
  return ck::model_states_name(placement_.stage, r, part);
}

// Whether rank `r` writes a model states file: at stage 3 every rank (its
// shards); below, each tensor-parallel part's first rank of its ZeRO group
// (rank 0 alone without tensor parallelism; each pipeline stage's), and
// under expert parallelism each expert rank's first data-parallel replica
// (its experts).
bool Engine::writes_model_states(int r) const {
  const comm::ParallelGrid& grid = topology_->grid();
  return placement_.stage == 3 || grid.rank_in_group(comm::groups::kZero, r) == 0 ||
         (grid.size(comm::Axis::kExpert) > 1 &&
          grid.rank_in_group(comm::groups::kExpertData, r) == 0);
}

ck::TrainingState Engine::training_state(const json::Value& client_state) const {
  ck::TrainingState s;
  s.dscore_version = DSCORE_VERSION;
  s.model_dtype = sdk::dtype_name(placement_.model_dtype);
  // Whole tensors, also under tensor parallelism (each part's fragments
  // say where they sit in them: format.h).
  for (const ParamEntry& p : model_layout().params())
    s.params.push_back({p.name, p.whole_shape(), p.whole_numel()});
  const comm::ParallelGrid& grid = topology_->grid();
  for (int r = 0; r < world_size(); ++r)
    if (writes_model_states(r)) s.model_files.push_back(model_file_of(r));
  for (int r = 0; r < world_size(); ++r)
    s.optim_files.push_back(ck::optim_states_name(config_.bf16.enabled, r,
                                                  grid.rank_in_group(comm::groups::kModel, r)));
  s.counters = {global_steps_, global_samples_, skipped_steps_, micro_steps_};
  const zero::LossScaler::State ls = scaler_.state();
  s.loss_scaler = {scaler_.is_dynamic(), ls.scale, ls.iteration, ls.last_overflow,
                   ls.hysteresis_left};
  s.lr_last_batch_iteration = schedule_->iteration();
  s.optimizer_type = optimizer_->instance().info().name;
  for (const zero::StateSlot& slot : optimizer_->slots())
    s.optimizer_slots.push_back(
        {slot.name, sdk::dtype_name(slot.dtype), static_cast<int64_t>(slot.elements_per_param)});
  s.sampler_next_global_step = global_steps_;
  s.train_batch_size = config_.batch.train_batch_size;
  s.seed = static_cast<int64_t>(config_.seed);
  s.ds_config = config_.resolved;
  s.client_state = client_state;
  return s;
}

Status Engine::write_checkpoint_files(const std::string& folder, const std::string& tag,
                                      const std::string& id, const json::Value& client_state) {
  const int stage = placement_.stage;
  const dscore_dtype md = placement_.model_dtype;
  const auto& params = layout_.params();
  ck::FileHeader header;
  header.tag = tag;
  header.checkpoint_id = id;
  header.rank = rank();
  header.world_size = world_size();
  header.zero_stage = stage;
  auto midway = [this] { failpoint("checkpoint.mid_write", rank()); };

  // This rank's optimizer states: fp32 masters and every slot it owns.
  header.kind = "optim_states";
  std::vector<ck::TensorData> tensors;
  // A fragment of parameter `p` (of its tensor-parallel part, where split).
  auto add = [&](const std::string& slot, const ParamEntry& p, int64_t begin, int64_t numel,
                 int64_t values, dscore_dtype dtype, const void* data, std::vector<int64_t> shape) {
    const std::string name = slot == ck::kParamSlot ? p.name : slot + "/" + p.name;
    tensors.push_back(
        {{name, dtype, shape.empty() ? std::vector<int64_t>{values} : std::move(shape)}, data});
    header.fragments.push_back({name, p.name, slot, begin, numel, p.split,
                                p.split.split() ? p.shape : std::vector<int64_t>{}});
  };
  // The optimizer state is streamed from where it lives (memory or NVMe):
  // `state` values from `first` on, piece by piece.
  OwnedState& owned = optimizer_->state();
  auto add_state = [&](const std::string& slot, int state, const zero::OwnedSegment& s, int64_t epp,
                       dscore_dtype dtype) {
    add(slot, params[s.param], s.element, s.numel, s.numel * epp, dtype, nullptr, {});
    const size_t es = sdk::dtype_size(dtype);
    const int64_t first = s.offset * epp;
    tensors.back().source = [&owned, state, first, es](uint64_t offset, void* dst, size_t bytes) {
      return owned.read(state, first + static_cast<int64_t>(offset / es),
                        static_cast<int64_t>(bytes / es), dst);
    };
  };
  // A pipeline stage's copies of tied layers are saved by the owner's stage.
  const size_t copied_params = pipelined() && !stage_model_->tie_copies().empty()
                                   ? layout_.layer_first(stage_model_->tie_copies().size())
                                   : 0;
  std::vector<zero::OwnedSegment> segments = strategy_->checkpoint_segments();
  // Under tensor parallelism the replicated parameters are the first
  // part's to save (each part saves its own split ones).
  const auto saved_elsewhere = [&](size_t param) {
    return param < copied_params || (tensor_parallel_rank() > 0 && !params[param].split.split());
  };
  std::erase_if(segments, [&](const zero::OwnedSegment& s) { return saved_elsewhere(s.param); });
  for (const zero::OwnedSegment& s : segments)
    add_state(ck::kMasterSlot, kMasterState, s, 1, DSCORE_DTYPE_F32);
  const std::vector<zero::StateSlot> slots = optimizer_->slots();
  for (size_t k = 0; k < slots.size(); ++k)
    for (const zero::OwnedSegment& s : segments)
      add_state(slots[k].name, static_cast<int>(k), s, slots[k].elements_per_param, slots[k].dtype);
  std::string optimizer_extra;
  if (optimizer_->instance().has_extra_state()) {
    DSCORE_ASSIGN_OR_RETURN(optimizer_extra, optimizer_->instance().save_extra_state());
    tensors.push_back({{ck::kOptimizerExtraTensor,
                        DSCORE_DTYPE_U8,
                        {static_cast<int64_t>(optimizer_extra.size())}},
                       optimizer_extra.data()});
  }
  DSCORE_RETURN_IF_ERROR(ck::write_safetensors(
      folder + "/" + ck::optim_states_name(config_.bf16.enabled, rank(), tensor_parallel_rank()),
      tensors, ck::header_metadata(header), midway));
  failpoint("checkpoint.between_files", rank());

  // The model states: the parameters as the model holds them, and the
  // training state.
  const std::vector<zero::ParamRun> runs = strategy_->checkpoint_params();
  // Below stage 3 one rank writes them: rank 0, under a pipeline each
  // stage's first data-parallel rank, and under tensor parallelism each
  // part's (the first of its ZeRO group: its sequence-parallel ranks hold
  // the same parameters); under expert parallelism also each expert rank's
  // first replica, its experts (checkpoint_params gives each its own).
  if (!writes_model_states(rank())) return Status::Ok();
  const std::string model_file = model_file_of(rank());
  header.kind = "model_states";
  header.fragments.clear();
  tensors.clear();
  for (const zero::ParamRun& r : runs) {
    if (saved_elsewhere(r.param)) continue;
    const ParamEntry& p = params[r.param];
    add(ck::kParamSlot, p, r.element, r.numel, r.numel, md, r.data,
        r.numel == p.numel && !p.split.split() ? p.shape : std::vector<int64_t>{r.numel});
    if (r.data == nullptr) {  // on NVMe: streamed
      const size_t es = sdk::dtype_size(md);
      tensors.back().source = [read = r.read, es](uint64_t offset, void* dst, size_t bytes) {
        return read(static_cast<int64_t>(offset / es), static_cast<int64_t>(bytes / es), dst);
      };
    }
  }
  std::string scheduler_extra;
  if (plugin_host::SchedulerInstance* sched = schedule_->scheduler();
      sched != nullptr && sched->has_extra_state()) {
    DSCORE_ASSIGN_OR_RETURN(scheduler_extra, sched->save_extra_state());
    tensors.push_back({{ck::kSchedulerExtraTensor,
                        DSCORE_DTYPE_U8,
                        {static_cast<int64_t>(scheduler_extra.size())}},
                       scheduler_extra.data()});
  }
  header.state = ck::to_json(training_state(client_state));
  return ck::write_safetensors(folder + "/" + model_file, tensors, ck::header_metadata(header));
}

// ---------------------------------------------------------------- load

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
  DSCORE_ASSIGN_OR_RETURN(ck::CheckpointInfo info, ck::open_checkpoint(dir, options.tag));
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
  const std::vector<std::string>& names = weights_only ? state.model_files : state.optim_files;
  DSCORE_ASSIGN_OR_RETURN(ck::FragmentSet set, ck::FragmentSet::open(loaded.path, names));
  if (set.headers().front().checkpoint_id != header0.checkpoint_id)
    return data_loss(loaded.path + " mixes files of two saves: restore the folder from one save");

  const auto& segments = strategy_->owned_segments();
  const char* master_slot = weights_only ? ck::kParamSlot : ck::kMasterSlot;
  DSCORE_RETURN_IF_ERROR(set.check_complete(master_slot, saved));
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
      DSCORE_RETURN_IF_ERROR(set.check_complete(slot.name, saved));
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
      const ck::SafetensorsReader& mine = set.files()[static_cast<size_t>(rank())];
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
