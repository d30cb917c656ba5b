// Engine::save_checkpoint: which bytes go where is
// core/checkpoint/format.h; this file is the protocol between ranks (the
// load is engine_checkpoint_load.cc).
//
// Every rank agrees on rank 0's tag (checkpoint.tag_validation), rank 0
// makes <dir>/<tag>.partial/, every rank writes its files there durably,
// all ranks agree that all succeeded, then rank 0 moves the folder to
// <dir>/<tag> (exchanging it with an older save of the same tag) and writes
// <dir>/latest. A crash or a failure anywhere before that leaves the
// previous checkpoint and `latest` as they were.
//
// Under checkpoint.use_node_local_storage `dir` is each node's own disk:
// each node's first rank does rank 0's part there, and below stage 3 also
// writes a copy of rank 0's model-states file (the training state every
// load starts from); the files list which host holds each rank's shards.
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
// In a node-local save's staging folder while nodes claim theirs: the
// save's id, written by the node that made the folder.
constexpr char kStagingMark[] = ".made-by-node";

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
  Result<bool> prepared = prepare_save(dir, staging, id);
  DSCORE_RETURN_IF_ERROR(prepared.status().with_context("cannot save " + where));
  const bool publishes = *prepared;
  const Status written =
      comm::agree(*comm_, write_checkpoint_files(staging, tag, id, options.client_state,
                                                 /*node_copy=*/publishes && rank() != 0));
  if (!written.ok()) {
    if (publishes) (void)ck::remove_tree(staging);
    return Status(written.code(), "cannot save " + where + ": " + written.message() +
                                      "; the previous checkpoint and " + dir +
                                      "/latest are unchanged");
  }
  failpoint("checkpoint.before_publish", rank());
  const Status published =
      publishes ? publish(dir, tag, staging, options.save_latest, rank()) : Status::Ok();
  DSCORE_RETURN_IF_ERROR(comm::agree(*comm_, published).with_context("cannot publish " + where));
  if (rank() == 0)
    log_info(
        "saved " + where +
        (node_local_checkpoints() ? " (node-local: each node's shards in its own folder)" : ""));
  return Status::Ok();
}

bool Engine::node_local_checkpoints() const {
  return config_.checkpoint.use_node_local_storage && nodes_.nodes() > 1;
}

Result<bool> Engine::prepare_save(const std::string& dir, const std::string& staging,
                                  const std::string& id) {
  if (!node_local_checkpoints()) {
    const Status prepared = rank() == 0 ? prepare_staging(dir, staging) : Status::Ok();
    DSCORE_RETURN_IF_ERROR(comm::agree(*comm_, prepared));
    return rank() == 0;
  }
  // Node by node, so a node whose "local" folder is one an earlier node
  // made (a shared filesystem after all) finds that node's mark in it and
  // leaves the folder to it instead of clearing it.
  const std::string mark = staging + "/" + kStagingMark;
  bool mine = false;
  for (int node = 0; node < nodes_.nodes(); ++node) {
    Status prepared = Status::Ok();
    if (nodes_.leader_of(node) == rank()) {
      auto seen = ck::read_text_file(mark, 256);
      if (seen.ok() && *seen == id) {
        log_warning("checkpoint.use_node_local_storage: " + dir + " on node " +
                    nodes_.name_of_node(node) +
                    " is the folder an earlier node writes (a shared filesystem): its shards are "
                    "saved there once");
      } else {
        prepared = prepare_staging(dir, staging);
        if (prepared.ok()) prepared = ck::write_file_durably(mark, id);
        mine = prepared.ok();
      }
    }
    DSCORE_RETURN_IF_ERROR(comm::agree(*comm_, prepared));
  }
  if (mine) DSCORE_RETURN_IF_ERROR(ck::remove_tree(mark));
  return mine;
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
  if (node_local_checkpoints()) {
    for (int r = 0; r < world_size(); ++r)
      if (writes_model_states(r)) s.model_file_hosts.push_back(nodes_.host_of(r));
    for (int r = 0; r < world_size(); ++r) s.optim_file_hosts.push_back(nodes_.host_of(r));
  }
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

// A pipeline stage's copies of tied layers (the layout's first
// parameters) are saved by the owner's stage.
size_t Engine::copied_tie_params() const {
  return pipelined() && !stage_model_->tie_copies().empty()
             ? layout_.layer_first(stage_model_->tie_copies().size())
             : 0;
}

// Under tensor parallelism the replicated parameters are the first part's
// to save (each part saves its own split ones).
bool Engine::saved_elsewhere(size_t param, size_t copied) const {
  return param < copied || (tensor_parallel_rank() > 0 && !layout_.params()[param].split.split());
}

// A fragment of parameter `p` (of its tensor-parallel part, where split).
void Engine::add_fragment(ck::FileHeader& header, std::vector<ck::TensorData>& tensors,
                          const std::string& slot, const ParamEntry& p, int64_t begin,
                          int64_t numel, int64_t values, dscore_dtype dtype, const void* data,
                          std::vector<int64_t> shape) {
  const std::string name = slot == ck::kParamSlot ? p.name : slot + "/" + p.name;
  tensors.push_back(
      {{name, dtype, shape.empty() ? std::vector<int64_t>{values} : std::move(shape)}, data});
  header.fragments.push_back({name, p.name, slot, begin, numel, p.split,
                              p.split.split() ? p.shape : std::vector<int64_t>{}});
}

Status Engine::write_checkpoint_files(const std::string& folder, const std::string& tag,
                                      const std::string& id, const json::Value& client_state,
                                      bool node_copy) {
  const int stage = placement_.stage;
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
  // The optimizer state is streamed from where it lives (memory or NVMe):
  // `state` values from `first` on, piece by piece.
  OwnedState& owned = optimizer_->state();
  auto add_state = [&](const std::string& slot, int state, const zero::OwnedSegment& s, int64_t epp,
                       dscore_dtype dtype) {
    add_fragment(header, tensors, slot, params[s.param], s.element, s.numel, s.numel * epp, dtype,
                 nullptr, {});
    const size_t es = sdk::dtype_size(dtype);
    const int64_t first = s.offset * epp;
    tensors.back().source = [&owned, state, first, es](uint64_t offset, void* dst, size_t bytes) {
      return owned.read(state, first + static_cast<int64_t>(offset / es),
                        static_cast<int64_t>(bytes / es), dst);
    };
  };
  const size_t copied = copied_tie_params();
  std::vector<zero::OwnedSegment> segments = strategy_->checkpoint_segments();
  std::erase_if(segments,
                [&](const zero::OwnedSegment& s) { return saved_elsewhere(s.param, copied); });
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

  // Below stage 3 one rank writes the model states: rank 0, under a
  // pipeline each stage's first data-parallel rank, and under tensor
  // parallelism each part's (the first of its ZeRO group: its
  // sequence-parallel ranks hold the same parameters); under expert
  // parallelism also each expert rank's first replica, its experts
  // (checkpoint_params gives each its own). With node-local storage the
  // rank that made another node's folder writes a copy of rank 0's there
  // (the same parameters below stage 3; at stage 3 every rank writes its
  // own).
  header.kind = "model_states";
  if (writes_model_states(rank()))
    DSCORE_RETURN_IF_ERROR(write_model_states(
        folder, model_file_of(rank()), strategy_->checkpoint_params(), header, client_state));
  if (node_copy && placement_.stage < 3)
    DSCORE_RETURN_IF_ERROR(write_model_states(folder, model_file_of(0), strategy_->replica_params(),
                                              header, client_state));
  return Status::Ok();
}

// The parameters as the model holds them, and the training state.
Status Engine::write_model_states(const std::string& folder, const std::string& name,
                                  const std::vector<zero::ParamRun>& runs, ck::FileHeader header,
                                  const json::Value& client_state) {
  const dscore_dtype md = placement_.model_dtype;
  const auto& params = layout_.params();
  const size_t copied = copied_tie_params();
  header.fragments.clear();
  std::vector<ck::TensorData> tensors;
  for (const zero::ParamRun& r : runs) {
    if (saved_elsewhere(r.param, copied)) continue;
    const ParamEntry& p = params[r.param];
    add_fragment(header, tensors, ck::kParamSlot, p, r.element, r.numel, r.numel, md, r.data,
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
  return ck::write_safetensors(folder + "/" + name, tensors, ck::header_metadata(header));
}

}  // namespace dscore
