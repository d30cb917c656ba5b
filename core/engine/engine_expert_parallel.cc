// Engine: what expert parallelism (expert_parallel.autoep_size,
// docs/moe.md#expert-parallelism) asks of the engine beyond its topology
// and the expert group lent to the model (engine_tensor_parallel.cc): ZeRO
// in two domains, the experts' over their expert-data-parallel group
// (core/zero/expert_split_zero.h), and that the model's experts tile the
// expert group: parts of whole tensors stacked over all experts (the
// gpt's), or each expert's own tensors held by one expert rank (the
// llama's), whose names the whole model's parameter list gathers.
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/comm/agreement.h"
#include "core/engine/engine.h"
#include "core/zero/expert_split_zero.h"

namespace dscore {

namespace {

// One expert parameter held whole (one expert's tensor, not a part of a
// stacked one).
bool held_whole(const ParamEntry& p) {
  return (p.flags & DSCORE_PARAM_EXPERT) != 0 && !p.split.split();
}

// One line per expert parameter held whole: layer, flags, shape, name.
std::string expert_lines(const ParamLayout& layout) {
  std::ostringstream out;
  for (const ParamEntry& p : layout.params()) {
    if (!held_whole(p)) continue;
    out << p.layer << ' ' << p.flags << ' ' << p.shape.size();
    for (int64_t d : p.shape) out << ' ' << d;
    out << ' ' << p.name << '\n';
  }
  return out.str();
}

std::vector<ParamEntry> parse_expert_lines(const std::string& text) {
  std::vector<ParamEntry> out;
  std::istringstream in(text);
  ParamEntry p;
  size_t ndim = 0;
  while (in >> p.layer >> p.flags >> ndim) {
    p.shape.assign(ndim, 0);
    p.numel = 1;
    for (int64_t& d : p.shape) in >> d, p.numel *= d;
    in.get();
    std::getline(in, p.name);
    out.push_back(p);
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<zero::ZeroStrategy>> Engine::make_strategy(const zero::ZeroContext& ctx) {
  if (expert_parallel_size() <= 1) return zero::make_zero_strategy(ctx);
  DSCORE_RETURN_IF_ERROR(check_expert_split());
  DSCORE_RETURN_IF_ERROR(gather_expert_layout());
  // Every rank splits or none does: the grid is the same on all.
  if (topology_->group(comm::groups::kExpertData) == nullptr) {
    DSCORE_ASSIGN_OR_RETURN(own_expert_group_, comm_->split(comm_->rank(), 0));
  }
  // Summed over the expert's replicas, divided by every data-parallel rank
  // (zero/expert_split_zero.h).
  const zero::Reduction reduction =
      zero::plan_reduction(config_, expert_data_group().world_size(), data_parallel_size());
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<zero::ExpertSplitZero> strategy,
                          zero::ExpertSplitZero::create(ctx, &expert_data_group(), reduction));
  return std::unique_ptr<zero::ZeroStrategy>(std::move(strategy));
}

Status Engine::check_expert_split() const {
  Status mine = Status::Ok();
  int experts = 0, whole = 0;
  for (const ParamEntry& p : layout_.params()) {
    if ((p.flags & DSCORE_PARAM_EXPERT) == 0) continue;
    ++experts;
    if (!mine.ok()) continue;
    if (held_whole(p)) {  // one expert's whole tensor, on this expert rank alone
      ++whole;
      continue;
    }
    if (p.split.dim != 0 || p.split.blocks != 1 ||
        p.split.full_extent != p.shape[0] * expert_parallel_size() ||
        p.split.offset != p.shape[0] * expert_parallel_rank())
      mine = invalid_argument("model '" + model_->display_name() + "' declares expert parameter " +
                              p.name + " as experts [" + std::to_string(p.split.offset) + ", " +
                              std::to_string(p.split.offset + p.shape[0]) + ") of " +
                              std::to_string(p.split.full_extent) + ", but expert rank " +
                              std::to_string(expert_parallel_rank()) + " of " +
                              std::to_string(expert_parallel_size()) + " holds an equal share " +
                              "in order along dimension 0");
  }
  if (whole > 0 && whole < experts && mine.ok())
    mine = invalid_argument("model '" + model_->display_name() +
                            "' declares some experts as parts of stacked tensors "
                            "(DSCORE_PARAM_TP_SPLIT) and some as whole tensors: expert "
                            "parallelism takes one form per model");
  if (experts == 0 && mine.ok())
    mine = invalid_argument("model '" + model_->display_name() +
                            "' declares no expert parameter (DSCORE_PARAM_EXPERT): it has no "
                            "MoE layers to spread over " +
                            std::to_string(expert_parallel_size()) +
                            " ranks; set the gpt's moe_num_experts (the llama's "
                            "num_local_experts), or expert_parallel.enabled false");
  return comm::agree(*comm_, mine);
}

// Experts held whole (one expert's tensors, on one expert rank): the whole
// model's parameter list (model_layout(): the checkpoints' list, gathers)
// is this rank's with each layer's experts replaced by every expert
// rank's, in expert-rank order, where this rank's sit. Collective over the
// expert group.
Status Engine::gather_expert_layout() {
  const std::string mine = expert_lines(layout_);
  comm::Communicator& experts = *topology_->group(comm::groups::kExpert);
  DSCORE_ASSIGN_OR_RETURN(std::vector<std::string> all, comm::allgather_strings(experts, mine));
  if (mine.empty()) return Status::Ok();  // stacked experts: every rank lists them all
  std::vector<std::vector<ParamEntry>> held;
  for (const std::string& text : all) held.push_back(parse_expert_lines(text));
  std::vector<ParamEntry> whole;
  for (size_t l = 0; l < layout_.layer_count(); ++l) {
    bool placed = false;
    for (size_t i = layout_.layer_first(l); i < layout_.layer_end(l); ++i) {
      const ParamEntry& p = layout_.params()[i];
      if (!held_whole(p)) {
        whole.push_back(p);
        continue;
      }
      if (placed) continue;
      placed = true;
      for (const std::vector<ParamEntry>& rank : held)
        for (const ParamEntry& e : rank)
          if (e.layer == l) whole.push_back(e);
    }
  }
  whole_layout_ = ParamLayout::of(std::move(whole), layout_.layer_count());
  return Status::Ok();
}

// The whole model's values from each expert rank's: its experts where the
// whole layout has them, the rest the group's first rank's (collective).
Status Engine::join_held_experts(const std::vector<float>& local, std::vector<float>* out) {
  std::map<std::string, int64_t> at;
  for (const ParamEntry& p : whole_layout_.params()) at[p.name] = p.offset;
  out->assign(static_cast<size_t>(whole_layout_.total_numel()), 0.0f);
  const bool first = expert_parallel_rank() == 0;
  for (const ParamEntry& p : layout_.params()) {
    if (!held_whole(p) && !first) continue;
    std::copy_n(local.data() + p.offset, p.numel, out->data() + at.at(p.name));
  }
  const int64_t total = whole_layout_.total_numel();
  return topology_->group(comm::groups::kExpert)
      ->allreduce({out->data(), DSCORE_DTYPE_F32, total}, {out->data(), DSCORE_DTYPE_F32, total},
                  DSCORE_REDUCE_SUM);
}

}  // namespace dscore
