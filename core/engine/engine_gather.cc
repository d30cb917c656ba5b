// Engine: the whole model's fp32 values (its master parameters, an
// optimizer state slot) gathered from the ranks' pieces, for tests and
// benches (EngineTesting): ZeRO's partitions over its group, then the
// tensor-parallel parts over the model group, then a pipeline's stages over
// the pipe group. Collective over the job; every rank gets the whole, in
// the whole model's layout order, each tensor at its whole size (a
// pipeline stage's copies of tied layers left out: the owner's stage gives
// them).
#include <algorithm>
#include <vector>

#include <dscore/cpp/dtype.hpp>

#include "core/checkpoint/format.h"
#include "core/engine/engine.h"

namespace dscore {

namespace {

// Where each parameter of `layout` starts when every tensor is whole, and
// the total.
std::vector<int64_t> whole_offsets(const ParamLayout& layout, int64_t* total) {
  std::vector<int64_t> at;
  *total = 0;
  for (const ParamEntry& p : layout.params()) {
    at.push_back(*total);
    *total += p.whole_numel();
  }
  return at;
}

}  // namespace

Status Engine::gather_parameters(std::vector<float>* out) {
  std::vector<float> local;
  if (strategy_->owned_master() != nullptr) {
    DSCORE_RETURN_IF_ERROR(strategy_->gather_master(&local));
  } else {
    // The master weights are on NVMe: read this rank's, then gather.
    std::vector<float> owned(static_cast<size_t>(strategy_->owned_numel()));
    DSCORE_RETURN_IF_ERROR(
        optimizer_->state().read(kMasterState, 0, strategy_->owned_numel(), owned.data()));
    DSCORE_RETURN_IF_ERROR(strategy_->gather_owned(owned.data(), &local));
  }
  return whole_model(std::move(local), out);
}

Status Engine::gather_optimizer_state(size_t slot, std::vector<float>* out) {
  const std::vector<zero::StateSlot> slots = optimizer_->slots();
  if (slot >= slots.size())
    return invalid_argument("no optimizer state slot " + std::to_string(slot));
  DSCORE_RETURN_IF_ERROR(stream_->synchronize());
  const uint32_t epp = slots[slot].elements_per_param;
  if (epp != 1 && (tensor_parallel_size() > 1 || expert_parallel_size() > 1 || pipelined()))
    return unimplemented("gathering a " + std::to_string(epp) +
                         "-wide optimizer state slot of a tensor-, expert-parallel or pipelined "
                         "run");
  const int64_t total = layout_.total_numel() * epp;
  std::vector<float> mine(static_cast<size_t>(total), 0.0f);
  std::vector<uint8_t> owned(static_cast<size_t>(total), 0);
  const size_t es = sdk::dtype_size(slots[slot].dtype);
  std::vector<char> values_of_segment;
  for (const zero::OwnedSegment& s : strategy_->owned_segments()) {
    const int64_t at = (layout_.params()[s.param].offset + s.element) * epp;
    values_of_segment.resize(static_cast<size_t>(s.numel * epp) * es);
    DSCORE_RETURN_IF_ERROR(optimizer_->state().read(static_cast<int>(slot), s.offset * epp,
                                                    s.numel * epp, values_of_segment.data()));
    DSCORE_RETURN_IF_ERROR(checkpoint::convert_values(values_of_segment.data(), slots[slot].dtype,
                                                      mine.data() + at, DSCORE_DTYPE_F32,
                                                      s.numel * epp));
    std::fill(owned.begin() + at, owned.begin() + at + s.numel * epp, 1);
  }
  // Over the ranks that partition this layout (ZeRO's group: a stage's,
  // a tensor-parallel part's data- and sequence-parallel ranks); under
  // expert parallelism the experts' over their expert-data group.
  std::vector<float> local(static_cast<size_t>(total), 0.0f);
  const auto take_from = [&](comm::Communicator& group, bool experts) -> Status {
    const int world = group.world_size();
    std::vector<float> values(mine.size() * static_cast<size_t>(world));
    std::vector<uint8_t> masks(owned.size() * static_cast<size_t>(world));
    DSCORE_RETURN_IF_ERROR(group.allgather({mine.data(), DSCORE_DTYPE_F32, total},
                                           {values.data(), DSCORE_DTYPE_F32, total * world}));
    DSCORE_RETURN_IF_ERROR(group.allgather({owned.data(), DSCORE_DTYPE_U8, total},
                                           {masks.data(), DSCORE_DTYPE_U8, total * world}));
    for (const ParamEntry& p : layout_.params()) {
      if (((p.flags & DSCORE_PARAM_EXPERT) != 0) != experts) continue;
      for (int64_t i = p.offset * epp; i < (p.offset + p.numel) * epp; ++i)
        for (int r = 0; r < world; ++r)
          if (masks[static_cast<size_t>(r * total + i)]) {
            local[static_cast<size_t>(i)] = values[static_cast<size_t>(r * total + i)];
            break;
          }
    }
    return Status::Ok();
  };
  const bool expert_parallel = expert_parallel_size() > 1;
  DSCORE_RETURN_IF_ERROR(take_from(zero_group(), false));
  DSCORE_RETURN_IF_ERROR(take_from(expert_parallel ? expert_data_group() : zero_group(), true));
  return whole_model(std::move(local), out);
}

Status Engine::whole_model(std::vector<float> local, std::vector<float>* out) {
  std::vector<float> stage;
  if (tensor_parallel_size() > 1) {
    DSCORE_RETURN_IF_ERROR(join_parts(comm::groups::kModel, local, &stage));
  } else if (expert_parallel_size() > 1 && !whole_layout_.params().empty()) {
    return join_held_experts(local, out);
  } else if (expert_parallel_size() > 1) {
    DSCORE_RETURN_IF_ERROR(join_parts(comm::groups::kExpert, local, &stage));
  } else {
    stage = std::move(local);
  }
  if (!pipelined()) {
    *out = std::move(stage);
    return Status::Ok();
  }
  return join_stages(stage, out);
}

Status Engine::join_parts(comm::AxisSet axes, const std::vector<float>& local,
                          std::vector<float>* out) {
  int64_t total = 0;
  const std::vector<int64_t> whole_offset = whole_offsets(layout_, &total);
  // Each rank writes its parts (the replicated tensors: the first rank);
  // the parts are disjoint, so the group's sum is the whole.
  out->assign(static_cast<size_t>(total), 0.0f);
  const bool first = topology_->rank_in_group(axes) == 0;
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamEntry& p = layout_.params()[i];
    if (!p.split.split() && !first) continue;
    p.for_each_whole_run(0, p.numel, [&](int64_t at, int64_t whole, int64_t n) {
      std::copy_n(local.data() + p.offset + at, n, out->data() + whole_offset[i] + whole);
    });
  }
  comm::Communicator& group = *topology_->group(axes);
  return group.allreduce({out->data(), DSCORE_DTYPE_F32, total},
                         {out->data(), DSCORE_DTYPE_F32, total}, DSCORE_REDUCE_SUM);
}

Status Engine::join_stages(const std::vector<float>& stage, std::vector<float>* out) {
  int64_t stage_total = 0, total = 0;
  const std::vector<int64_t> stage_at = whole_offsets(layout_, &stage_total);
  const std::vector<int64_t> whole_at = whole_offsets(whole_layout_, &total);
  if (static_cast<int64_t>(stage.size()) != stage_total)
    return internal_error("a pipeline stage's values do not match its layout");
  // Each stage writes its own layers (not its tie copies) where they sit
  // in the whole model; the stages are disjoint, so the sum is the whole.
  out->assign(static_cast<size_t>(total), 0.0f);
  const std::vector<size_t>& copies = stage_model_->tie_copies();
  for (size_t l = 0; l < layout_.layer_count(); ++l) {
    if (std::binary_search(copies.begin(), copies.end(), l)) continue;
    const size_t first = layout_.layer_first(l);
    const size_t whole_first = whole_layout_.layer_first(stage_model_->global_layer(l));
    for (size_t k = 0; first + k < layout_.layer_end(l); ++k) {
      const int64_t n = layout_.params()[first + k].whole_numel();
      std::copy_n(stage.data() + stage_at[first + k], n, out->data() + whole_at[whole_first + k]);
    }
  }
  comm::Communicator& pipe = *topology_->group(comm::groups::kPipe);
  return pipe.allreduce({out->data(), DSCORE_DTYPE_F32, total},
                        {out->data(), DSCORE_DTYPE_F32, total}, DSCORE_REDUCE_SUM);
}

}  // namespace dscore
