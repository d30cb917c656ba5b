// DeepSpeed checkpoint import (deepspeed_import.h). The layouts, as
// DeepSpeed 0.19's engine saves them (runtime/zero/stage_1_and_2.py
// state_dict, stage3.py _rigid_state_dict, utils/zero_to_fp32.py reads them
// back the same way):
//   stages 1-2: a group's parameters back to back, padded to a multiple of
//     2 x ranks; rank r owns [r*p, (r+1)*p) with p the padded size / ranks;
//     its fp32 slice is saved without the padding, its Adam moments with it.
//   stage 3: parameter i gives every rank c_i = ceil(n_i / ranks) elements
//     (rank r: [r*c_i, (r+1)*c_i), the last padded), back to back in the
//     rank's flat group(s), in param_shapes order.
//   stage 0: the module holds the fp32 weights, the torch optimizer's state
//     dict holds each parameter's moments.
#include "core/checkpoint/deepspeed_import.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "core/base/strings.h"
#include "core/checkpoint/durable_file.h"
#include "core/checkpoint/format.h"
#include "core/checkpoint/safetensors.h"
#include "core/checkpoint/torch_file.h"
#include "core/checkpoint/training_state.h"
#include "core/tensor/dtype_ops.h"

namespace dscore::checkpoint {
namespace {

using K = PickleValue::Kind;

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

// One run of a parameter's elements inside a rank's flat partition.
struct Piece {
  size_t param = 0;
  int64_t element = 0;  // first element of the parameter
  int64_t numel = 0;
  int64_t offset = 0;  // in the partition
};

// What one rank's optimizer file holds, read.
struct RankState {
  std::vector<float> fp32;                          // the master partition(s), concatenated
  std::map<std::string, std::vector<float>> slots;  // each moment, the same layout (padded)
  std::vector<Piece> pieces;
  double step = 0;
};

Result<json::Value> to_json(const PickleValue& v) {
  switch (v.kind) {
    case K::kNone:
      return json::Value();
    case K::kBool:
      return json::Value(v.boolean);
    case K::kInt:
      return json::Value(v.integer);
    case K::kFloat:
      return json::Value(v.real);
    case K::kString:
      return json::Value(v.text);
    case K::kList:
    case K::kTuple: {
      json::Value out = json::Value::array();
      for (const PickleRef& item : v.items) {
        DSCORE_ASSIGN_OR_RETURN(json::Value j, to_json(*item));
        out.push_back(std::move(j));
      }
      return out;
    }
    case K::kDict: {
      json::Value out = json::Value::object();
      for (const auto& [key, value] : v.dict) {
        if (!key->is(K::kString)) continue;
        DSCORE_ASSIGN_OR_RETURN(json::Value j, to_json(*value));
        out.set(key->text, std::move(j));
      }
      return out;
    }
    default:
      return json::Value();  // objects and tensors: not config values
  }
}

class Importer {
 public:
  Importer(std::string ds_dir, std::string out_dir)
      : ds_dir_(std::move(ds_dir)), out_dir_(std::move(out_dir)) {}

  Result<DeepSpeedImportResult> run(const DeepSpeedImportOptions& options) {
    DSCORE_RETURN_IF_ERROR(find_tag(options.tag));
    DSCORE_RETURN_IF_ERROR(read_model_states());
    // One rank at a time, read and written: memory holds one rank's state.
    const int files = universal_ || stage_ == 0 ? 1 : world_;
    DSCORE_RETURN_IF_ERROR(begin_output());
    std::vector<int64_t> covered(params_.size(), 0);
    for (int r = 0; r < files; ++r) {
      Result<RankState> state = universal_    ? read_universal()
                                : stage_ == 0 ? read_stage0()
                                              : read_optim_states(r);
      if (!state.ok()) return abandon(state.status());
      for (const Piece& p : state->pieces) covered[p.param] += p.numel;
      if (Status st = write_rank(r, files, *state); !st.ok()) return abandon(st);
    }
    if (Status st = finish_output(covered); !st.ok()) return abandon(st);
    DeepSpeedImportResult result;
    result.tag = tag_;
    result.world_size = world_;
    result.zero_stage = stage_;
    result.model_dtype = sdk::dtype_name(model_dtype_);
    result.optimizer = optimizer_type_;
    result.params = params_.size();
    result.groups = groups_.size();
    for (const Param& p : params_) result.elements += p.numel;
    result.global_steps = global_steps_;
    result.files = files_;
    return result;
  }

 private:
  std::string folder() const { return ds_dir_ + "/" + tag_; }

  Status unsupported(const std::string& file, const std::string& what) const {
    return unimplemented(file + ": " + what +
                         " is not supported by dscore's DeepSpeed import (docs/checkpoints.md)");
  }
  Status layout_error(const std::string& file, const std::string& what) const {
    return data_loss(file + ": " + what +
                     ": not the layout DeepSpeed 0.16-0.19 saves, or the file "
                     "is damaged");
  }

  Status find_tag(const std::string& wanted) {
    if (!is_folder(ds_dir_)) return not_found(ds_dir_ + ": no such folder");
    tag_ = wanted;
    if (tag_.empty()) {
      // `latest`, or `latest_universal` where only ds_to_universal.py's output is.
      const bool universal =
          !path_exists(ds_dir_ + "/latest") && path_exists(ds_dir_ + "/latest_universal");
      auto latest = read_text_file(ds_dir_ + (universal ? "/latest_universal" : "/latest"), 4096);
      if (!latest.ok())
        return not_found(ds_dir_ +
                         "/latest: missing; name the checkpoint with --tag (a "
                         "global_step<N> folder of " +
                         ds_dir_ + ")");
      tag_ = *latest;
      while (!tag_.empty() && (tag_.back() == '\n' || tag_.back() == ' ')) tag_.pop_back();
    }
    DSCORE_RETURN_IF_ERROR(check_tag(tag_));
    if (!is_folder(folder())) return not_found(folder() + ": no such checkpoint folder");
    universal_ = is_folder(folder() + "/zero");
    if (path_exists(folder() + "/mp_rank_01_model_states.pt") ||
        path_exists(folder() + "/zero_pp_rank_0_mp_rank_01_model_states.pt"))
      return unsupported(folder(), "a checkpoint saved with model (tensor) parallelism");
    return Status::Ok();
  }

  Status read_model_states() {
    std::string name = folder() + "/mp_rank_00_model_states.pt";
    if (!path_exists(name)) name = folder() + "/zero_pp_rank_0_mp_rank_00_model_states.pt";
    if (!path_exists(name))
      return not_found(folder() +
                       ": no mp_rank_00_model_states.pt (stages 0-2) or "
                       "zero_pp_rank_0_mp_rank_00_model_states.pt (stage 3): not a "
                       "DeepSpeed checkpoint folder");
    DSCORE_ASSIGN_OR_RETURN(model_file_, TorchFile::open(name));
    const PickleValue& root = model_file_->root();
    if (!root.is(K::kDict)) return layout_error(name, "the pickle is not a dict");
    auto integer = [&](const char* key, int64_t fallback) {
      const PickleValue* v = root.get(key);
      return v != nullptr && v->is(K::kInt) ? v->integer : fallback;
    };
    global_steps_ = integer("global_steps", 0);
    global_samples_ = integer("global_samples", 0);
    skipped_steps_ = integer("skipped_steps", 0);
    world_ = static_cast<int>(integer("dp_world_size", 1));
    if (world_ < 1) return layout_error(name, "dp_world_size is below 1");
    if (const PickleValue* c = root.get("ds_config"); c != nullptr && c->is(K::kDict)) {
      DSCORE_ASSIGN_OR_RETURN(ds_config_, to_json(*c));
    } else {
      return layout_error(name, "no ds_config");
    }
    const json::Value* zero = ds_config_.find("zero_optimization");
    const json::Value* st = zero != nullptr && zero->is_object() ? zero->find("stage") : nullptr;
    stage_ = st != nullptr && st->is_number() ? static_cast<int>(st->as_int()) : 0;
    if (stage_ < 0 || stage_ > 3) return layout_error(name, "ZeRO stage " + std::to_string(stage_));
    auto enabled = [&](const char* section) {
      const json::Value* s = ds_config_.find(section);
      const json::Value* e = s != nullptr && s->is_object() ? s->find("enabled") : nullptr;
      return e != nullptr && e->is_bool() && e->as_bool();
    };
    model_dtype_ = enabled("bf16")   ? DSCORE_DTYPE_BF16
                   : enabled("fp16") ? DSCORE_DTYPE_F16
                                     : DSCORE_DTYPE_F32;
    if (const json::Value* o = ds_config_.find("optimizer"); o != nullptr && o->is_object())
      if (const json::Value* t = o->find("type"); t != nullptr && t->is_string())
        optimizer_type_ = t->as_string();
    if (to_lower(optimizer_type_) == "muon")
      return unimplemented(name +
                           ": a Muon run's checkpoint (its matrices' momentum_buffer and "
                           "the Adam half's moments in separate groups) is not imported "
                           "yet; import an Adam/AdamW/LAMB run's, or load only the "
                           "weights (\"load_module_only\")");
    if (const PickleValue* ls = root.get("lr_scheduler"); ls != nullptr && ls->is(K::kDict)) {
      const PickleValue* it = ls->get("last_batch_iteration");
      if (it != nullptr && it->is(K::kInt)) lr_iteration_ = it->integer;
    } else {
      lr_iteration_ = global_steps_ - 1;
    }
    if (const PickleValue* frozen = root.get("frozen_param_shapes");
        frozen != nullptr && frozen->is(K::kDict) && !frozen->dict.empty())
      return unsupported(name, "frozen parameters (requires_grad=False)");
    // The parameters: param_shapes (stages 1-3, one OrderedDict per group),
    // or the module's state dict at stage 0.
    const PickleValue* module = root.get("module");
    if (module == nullptr || !module->is(K::kDict))
      return layout_error(name, "no module state dict");
    module_ = module;
    if (stage_ == 0) {
      for (const auto& [key, value] : module->dict) {
        if (!key->is(K::kString) || !value->is(K::kTensor))
          return layout_error(name, "a module entry that is not a named tensor");
        params_.push_back({key->text, value->tensor.shape, value->tensor.numel()});
      }
      groups_.push_back(params_.size());
      return Status::Ok();
    }
    const PickleValue* shapes = root.get("param_shapes");
    if (shapes == nullptr || !shapes->is(K::kList) || shapes->items.empty())
      return layout_error(name, "no param_shapes");
    for (const PickleRef& group : shapes->items) {
      if (!group->is(K::kDict)) return layout_error(name, "a param_shapes group is not a dict");
      for (const auto& [key, value] : group->dict) {
        if (!key->is(K::kString) || !value->is(K::kTuple))
          return layout_error(name, "a param_shapes entry is not a name and a size");
        Param p{key->text, {}, 1};
        for (const PickleRef& d : value->items) {
          if (!d->is(K::kInt) || d->integer < 0) return layout_error(name, "a negative size");
          p.shape.push_back(d->integer);
          p.numel *= d->integer;
        }
        params_.push_back(std::move(p));
      }
      groups_.push_back(params_.size());
    }
    return Status::Ok();
  }

  // The torch optimizer state of one group or parameter: its moments by
  // name (the step apart) into `out`, each checked to hold `numel` values.
  Status read_moments(const TorchFile& file, const PickleValue& state, int64_t numel, int64_t at,
                      RankState* out) {
    for (const auto& [key, value] : state.dict) {
      if (!key->is(K::kString)) continue;
      if (key->text == "step") {
        if (value->is_number()) out->step = std::max(out->step, value->number());
        if (value->is(K::kTensor)) {
          DSCORE_ASSIGN_OR_RETURN(double s, file.read_scalar(value->tensor));
          out->step = std::max(out->step, s);
        }
        continue;
      }
      if (!value->is(K::kTensor)) continue;
      if (value->tensor.numel() != numel)
        return layout_error(file.path(), "optimizer state " + printable(key->text) + " has " +
                                             std::to_string(value->tensor.numel()) +
                                             " values where " + std::to_string(numel) +
                                             " were expected");
      std::vector<float>& slot = out->slots[key->text];
      if (slot.size() < static_cast<size_t>(at + numel))
        slot.resize(static_cast<size_t>(at + numel));
      DSCORE_RETURN_IF_ERROR(file.read_f32(value->tensor, 0, numel, slot.data() + at));
    }
    return Status::Ok();
  }

  // One rank holding every parameter whole, back to back (stage 0, universal).
  RankState whole_parameters() const {
    RankState out;
    int64_t at = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      out.pieces.push_back({i, 0, params_[i].numel, at});
      at += params_[i].numel;
    }
    out.fp32.resize(static_cast<size_t>(at));
    return out;
  }

  Result<RankState> read_stage0() {
    const std::string& name = model_file_->path();
    RankState out = whole_parameters();
    for (const Piece& p : out.pieces)
      DSCORE_RETURN_IF_ERROR(model_file_->read_f32(module_->dict[p.param].second->tensor, 0,
                                                   p.numel, out.fp32.data() + p.offset));
    if (model_dtype_ != DSCORE_DTYPE_F32)
      return unsupported(name,
                         "a ZeRO stage 0 checkpoint in bf16 or fp16 (its fp32 master "
                         "lives in the 16-bit optimizer wrapper's own layout)");
    const PickleValue* optimizer = model_file_->root().get("optimizer");
    const PickleValue* state = optimizer != nullptr ? optimizer->get("state") : nullptr;
    if (state == nullptr || !state->is(K::kDict))
      return layout_error(name, "no optimizer state dict");
    for (const Piece& p : out.pieces) {
      const PickleValue* s = state->get(static_cast<int64_t>(p.param));
      if (s == nullptr) continue;  // a parameter without state yet
      DSCORE_RETURN_IF_ERROR(read_moments(*model_file_, *s, p.numel, p.offset, &out));
    }
    for (auto& [slot, values] : out.slots) values.resize(out.fp32.size());
    return out;
  }

  // ds_to_universal.py's folder: zero/<param>/{fp32,<moment>...}.pt each
  // {'param': the whole tensor} (or the tensor, flat, from a stage-3 save),
  // zero/<param>/step.pt, zero/optimizer_state.pt.
  Result<RankState> read_universal() {
    RankState out = whole_parameters();
    for (const Piece& p : out.pieces) {
      const std::string dir = folder() + "/zero/" + params_[p.param].name;
      std::vector<std::string> names;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        names.push_back(e.path().filename().string());
      if (ec)
        return not_found(dir + ": missing from the universal checkpoint (" + ec.message() + ")");
      std::sort(names.begin(), names.end());
      for (const std::string& n : names) {
        if (n.size() < 4 || n.substr(n.size() - 3) != ".pt") continue;
        DSCORE_ASSIGN_OR_RETURN(TorchFile file, TorchFile::open(dir + "/" + n));
        const std::string slot = n.substr(0, n.size() - 3);
        if (slot == "step") {
          if (file.root().is_number()) out.step = std::max(out.step, file.root().number());
          continue;
        }
        // {'param': tensor, 'cat_dim': 0}, or (from a stage-3 save) the flat tensor alone.
        const PickleValue* t = file.root().is(K::kTensor) ? &file.root() : file.root().get("param");
        if (t == nullptr || !t->is(K::kTensor) || t->tensor.numel() != p.numel)
          return layout_error(file.path(), "no tensor of " + std::to_string(p.numel) +
                                               " elements (a 'param' entry or the whole file)");
        std::vector<float>& dst = slot == "fp32" ? out.fp32 : out.slots[slot];
        dst.resize(out.fp32.size());
        DSCORE_RETURN_IF_ERROR(file.read_f32(t->tensor, 0, p.numel, dst.data() + p.offset));
      }
    }
    const std::string common = folder() + "/zero/optimizer_state.pt";
    if (path_exists(common)) {
      DSCORE_ASSIGN_OR_RETURN(TorchFile file, TorchFile::open(common));
      if (const PickleValue* scale = file.root().get("loss_scaler"))
        read_loss_scaler(*scale, file.root().get("dynamic_loss_scale"));
    }
    return out;
  }

  std::string optim_name(int rank) const {
    return folder() + "/" + (model_dtype_ == DSCORE_DTYPE_BF16 ? "bf16_" : "") + "zero_pp_rank_" +
           std::to_string(rank) + "_mp_rank_00_optim_states.pt";
  }

  Result<RankState> read_optim_states(int rank) {
    const std::string name = optim_name(rank);
    if (!path_exists(name))
      return not_found(name + ": missing; the checkpoint was saved by " + std::to_string(world_) +
                       " ranks and needs every rank's optimizer file");
    DSCORE_ASSIGN_OR_RETURN(TorchFile file, TorchFile::open(name));
    const PickleValue* osd = file.root().get("optimizer_state_dict");
    if (osd == nullptr || !osd->is(K::kDict)) return layout_error(name, "no optimizer_state_dict");
    if (const PickleValue* scale = osd->get("loss_scaler"); scale != nullptr && rank == 0)
      read_loss_scaler(*scale, osd->get("dynamic_loss_scale"));
    const PickleValue* flats =
        osd->get(stage_ == 3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups");
    const PickleValue* base =
        osd->get(stage_ == 3 ? "optimizer_state_dict" : "base_optimizer_state");
    if (flats == nullptr || !flats->is(K::kList) || base == nullptr)
      return layout_error(name, "no fp32 partitions or base optimizer state");
    const PickleValue* state = base->get("state");
    if (state == nullptr || !state->is(K::kDict)) return layout_error(name, "no optimizer state");
    if (stage_ < 3 && flats->items.size() != groups_.size())
      return unsupported(name, std::to_string(flats->items.size()) + " fp32 groups for " +
                                   std::to_string(groups_.size()) + " parameter groups");

    RankState out;
    int64_t at = 0;  // where the next flat group starts in out.fp32
    size_t next_param = 0;
    for (size_t g = 0; g < flats->items.size(); ++g) {
      const PickleValue& flat = *flats->items[g];
      if (!flat.is(K::kTensor)) return layout_error(name, "an fp32 group is not a tensor");
      const PickleValue* group_state = state->get(static_cast<int64_t>(g));
      int64_t padded = flat.tensor.numel();  // the partition with its padding
      if (group_state != nullptr)
        for (const auto& [key, value] : group_state->dict)
          if (value->is(K::kTensor) && value->tensor.numel() > 1) padded = value->tensor.numel();
      DSCORE_RETURN_IF_ERROR(
          stage_ == 3
              ? stage3_pieces(name, rank, flat.tensor.numel(), at, &next_param, &out.pieces)
              : stage12_pieces(name, rank, g, flat.tensor.numel(), padded, at, &out.pieces));
      out.fp32.resize(static_cast<size_t>(at + padded));
      DSCORE_RETURN_IF_ERROR(
          file.read_f32(flat.tensor, 0, flat.tensor.numel(), out.fp32.data() + at));
      if (group_state != nullptr)
        DSCORE_RETURN_IF_ERROR(read_moments(file, *group_state, padded, at, &out));
      at += padded;
    }
    if (stage_ == 3 && next_param != params_.size())
      return layout_error(
          name, "the fp32 groups end before parameter " + printable(params_[next_param].name));
    for (auto& [slot, values] : out.slots) values.resize(static_cast<size_t>(at));
    return out;
  }

  // Stages 1-2: group `g`'s parameters back to back; this rank owns
  // [rank * padded, (rank + 1) * padded) of them.
  Status stage12_pieces(const std::string& name, int rank, size_t g, int64_t saved, int64_t padded,
                        int64_t at, std::vector<Piece>* pieces) {
    const size_t first = g == 0 ? 0 : groups_[g - 1];
    int64_t total = 0;
    for (size_t i = first; i < groups_[g]; ++i) total += params_[i].numel;
    const int64_t begin = static_cast<int64_t>(rank) * padded;
    const int64_t owned = std::clamp<int64_t>(total - begin, 0, padded);
    if ((saved != owned && saved != padded) || padded * world_ < total)
      return layout_error(name, "rank " + std::to_string(rank) + " saved " + std::to_string(saved) +
                                    " fp32 values of group " + std::to_string(g) + " (" +
                                    std::to_string(total) + " elements over " +
                                    std::to_string(world_) + " ranks)");
    int64_t offset = 0;  // of the parameter in the group
    for (size_t i = first; i < groups_[g]; ++i) {
      const int64_t lo = std::max(offset, begin),
                    hi = std::min(offset + params_[i].numel, begin + owned);
      if (lo < hi) pieces->push_back({i, lo - offset, hi - lo, at + (lo - begin)});
      offset += params_[i].numel;
    }
    return Status::Ok();
  }

  // Stage 3: each parameter's ceil(n / ranks) chunk, back to back, filling
  // this flat group of `numel` values from parameter *next on.
  Status stage3_pieces(const std::string& name, int rank, int64_t numel, int64_t at, size_t* next,
                       std::vector<Piece>* pieces) {
    int64_t used = 0;
    while (*next < params_.size() && used < numel) {
      const Param& p = params_[*next];
      const int64_t chunk = (p.numel + world_ - 1) / world_;
      if (used + chunk > numel)
        return layout_error(name,
                            "parameter " + printable(p.name) + " does not fit its flat group");
      const int64_t begin = static_cast<int64_t>(rank) * chunk;
      const int64_t count = std::clamp<int64_t>(p.numel - begin, 0, chunk);
      if (count > 0) pieces->push_back({*next, begin, count, at + used});
      used += chunk;
      ++*next;
    }
    if (used != numel)
      return layout_error(name, "a flat group of " + std::to_string(numel) + " values holds " +
                                    std::to_string(used) + " of parameter chunks");
    return Status::Ok();
  }

  void read_loss_scaler(const PickleValue& scaler, const PickleValue* dynamic) {
    dynamic_scale_ = dynamic != nullptr && dynamic->is(K::kBool) && dynamic->boolean;
    auto number = [&](const char* key, double* out) {
      const PickleValue* v = scaler.get(key);
      if (v != nullptr && v->is_number()) *out = v->number();
    };
    number("cur_scale", &scale_);
    double iteration = 0, last_overflow = -1, hysteresis = 1;
    number("cur_iter", &iteration);
    number("last_overflow_iter", &last_overflow);
    number("cur_hysteresis", &hysteresis);
    scale_iteration_ = static_cast<int64_t>(iteration);
    last_overflow_ = static_cast<int64_t>(last_overflow);
    hysteresis_ = static_cast<int64_t>(hysteresis);
  }

  // Every element of every parameter in exactly one rank's pieces.
  Status check_complete(const std::vector<int64_t>& covered) const {
    for (size_t i = 0; i < params_.size(); ++i)
      if (covered[i] != params_[i].numel)
        return layout_error(folder(), "parameter " + printable(params_[i].name) + " has " +
                                          std::to_string(covered[i]) + " of its " +
                                          std::to_string(params_[i].numel) +
                                          " elements across the rank files");
    return Status::Ok();
  }

  // `files` ranks' files; the optimizer's slots as rank 0 holds them.
  TrainingState training_state(int files, const RankState& rank0) const {
    TrainingState s;
    s.dscore_version = DSCORE_VERSION;
    s.model_dtype = sdk::dtype_name(model_dtype_);
    for (const Param& p : params_) s.params.push_back({p.name, p.shape, p.numel});
    for (int r = 0; r < files; ++r) {
      if (stage_ == 3 || r == 0) s.model_files.push_back(model_states_name(stage_, r));
      s.optim_files.push_back(optim_states_name(model_dtype_ == DSCORE_DTYPE_BF16, r));
    }
    int64_t gas = 1;
    if (const json::Value* g = ds_config_.find("gradient_accumulation_steps");
        g != nullptr && g->is_number())
      gas = g->as_int();
    s.counters = {global_steps_, global_samples_, skipped_steps_, global_steps_ * gas};
    s.loss_scaler = {dynamic_scale_, scale_, scale_iteration_, last_overflow_, hysteresis_};
    s.lr_last_batch_iteration = lr_iteration_;
    s.optimizer_type = to_lower(optimizer_type_);
    for (const auto& [slot, values] : rank0.slots) s.optimizer_slots.push_back({slot, "fp32", 1});
    s.sampler_next_global_step = global_steps_;
    if (const json::Value* t = ds_config_.find("train_batch_size"); t != nullptr && t->is_number())
      s.train_batch_size = t->as_int();
    if (const json::Value* seed = ds_config_.find("seed"); seed != nullptr && seed->is_number())
      s.seed = seed->as_int();
    s.ds_config = ds_config_;
    s.client_state = json::Value::object();
    return s;
  }

  // The output goes to <out>/<tag>.partial first; finish_output publishes it.
  Status begin_output() {
    DSCORE_RETURN_IF_ERROR(make_folders(out_dir_));
    final_folder_ = out_dir_ + "/" + tag_;
    if (path_exists(final_folder_))
      return failed_precondition(final_folder_ +
                                 " exists: import into another folder, or remove it");
    staging_ = final_folder_ + ".partial";
    DSCORE_RETURN_IF_ERROR(remove_tree(staging_));
    DSCORE_RETURN_IF_ERROR(make_folders(staging_));
    std::mt19937_64 rng(std::random_device{}());
    checkpoint_id_ = "import-" + std::to_string(rng());
    return Status::Ok();
  }

  Status abandon(const Status& status) {
    if (!staging_.empty()) (void)remove_tree(staging_);
    return status;
  }

  // Rank r's optimizer file (and its model-states file at stage 3, rank 0's
  // at every stage, with the training state).
  Status write_rank(int r, int files, const RankState& rs) {
    std::vector<std::string> slots;
    for (const auto& [name, values] : rs.slots) slots.push_back(name);
    if (r == 0) {
      state_json_ = to_json(training_state(files, rs));
      slots_ = slots;
    } else if (slots != slots_) {
      return layout_error(optim_name(r), "its optimizer state differs from rank 0's");
    }
    FileHeader header;
    header.kind = "optim_states";
    header.tag = tag_;
    header.checkpoint_id = checkpoint_id_;
    header.rank = r;
    header.world_size = files;
    header.zero_stage = stage_;
    std::vector<TensorData> tensors;
    auto add = [&](const std::string& slot, const Piece& p, const float* values) {
      const std::string tensor = slot + "/" + params_[p.param].name;
      tensors.push_back({{tensor, DSCORE_DTYPE_F32, {p.numel}}, values + p.offset});
      header.fragments.push_back({tensor, params_[p.param].name, slot, p.element, p.numel});
    };
    for (const Piece& p : rs.pieces) add(kMasterSlot, p, rs.fp32.data());
    for (const auto& [slot, values] : rs.slots)
      for (const Piece& p : rs.pieces) add(slot, p, values.data());
    const std::string optim = optim_states_name(model_dtype_ == DSCORE_DTYPE_BF16, r);
    DSCORE_RETURN_IF_ERROR(
        write_safetensors(staging_ + "/" + optim, tensors, header_metadata(header)));
    files_.push_back(optim);
    if (stage_ < 3 && r > 0) return Status::Ok();
    return write_model_states(staging_, header, rs, state_json_);
  }

  Status finish_output(const std::vector<int64_t>& covered) {
    DSCORE_RETURN_IF_ERROR(check_complete(covered));
    bool exchanged = false;
    DSCORE_RETURN_IF_ERROR(rename_or_exchange(staging_, final_folder_, &exchanged));
    staging_.clear();
    DSCORE_RETURN_IF_ERROR(sync_folder(out_dir_));
    return write_file_durably(out_dir_ + "/" + kLatestName, tag_);
  }

  // The parameters in the model's dtype: stages 0-2 from the module's
  // tensors (rank 0 writes them all), stage 3 from this rank's fp32 pieces
  // rounded to the model dtype (what DeepSpeed's module holds).
  Status write_model_states(const std::string& staging, FileHeader header, const RankState& rs,
                            const json::Value& state_json) {
    header.kind = "model_states";
    header.fragments.clear();
    header.state = state_json;
    const size_t width = sdk::dtype_size(model_dtype_);
    std::vector<std::string> buffers;
    std::vector<TensorData> tensors;
    auto add = [&](const Param& p, int64_t element, const float* fp32, int64_t numel) {
      std::string bytes(static_cast<size_t>(numel) * width, '\0');
      tensor::convert(fp32, DSCORE_DTYPE_F32, bytes.data(), model_dtype_, numel);
      buffers.push_back(std::move(bytes));
      header.fragments.push_back({p.name, p.name, kParamSlot, element, numel});
      tensors.push_back(
          {{p.name, model_dtype_, numel == p.numel ? p.shape : std::vector<int64_t>{numel}},
           nullptr});
    };
    if (stage_ < 3) {
      for (size_t i = 0; i < params_.size(); ++i) {
        const PickleValue* t = module_->get(params_[i].name);
        if (t == nullptr || !t->is(K::kTensor) || t->tensor.numel() != params_[i].numel)
          return layout_error(model_file_->path(),
                              "the module has no tensor " + printable(params_[i].name) + " of " +
                                  std::to_string(params_[i].numel) + " elements");
        std::vector<float> values(static_cast<size_t>(params_[i].numel));
        DSCORE_RETURN_IF_ERROR(
            model_file_->read_f32(t->tensor, 0, params_[i].numel, values.data()));
        add(params_[i], 0, values.data(), params_[i].numel);
      }
    } else {
      for (const Piece& p : rs.pieces)
        add(params_[p.param], p.element, rs.fp32.data() + p.offset, p.numel);
    }
    buffers.shrink_to_fit();
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = buffers[i].data();
    const std::string name = model_states_name(stage_, header.rank);
    DSCORE_RETURN_IF_ERROR(
        write_safetensors(staging + "/" + name, tensors, header_metadata(header)));
    files_.push_back(name);
    return Status::Ok();
  }

  std::string ds_dir_, out_dir_, tag_;
  bool universal_ = false;  // ds_to_universal.py's layout: one whole tensor per parameter and state
  std::optional<TorchFile> model_file_;
  const PickleValue* module_ = nullptr;
  json::Value ds_config_;
  int world_ = 1, stage_ = 0;
  dscore_dtype model_dtype_ = DSCORE_DTYPE_F32;
  std::string optimizer_type_;
  std::vector<Param> params_;
  std::vector<size_t> groups_;  // the end of each parameter group in params_
  int64_t global_steps_ = 0, global_samples_ = 0, skipped_steps_ = 0, lr_iteration_ = -1;
  bool dynamic_scale_ = false;
  double scale_ = 1;
  int64_t scale_iteration_ = 0, last_overflow_ = -1, hysteresis_ = 1;
  std::vector<std::string> files_;
  std::string final_folder_, staging_, checkpoint_id_;
  json::Value state_json_;          // the training state, from rank 0's file
  std::vector<std::string> slots_;  // rank 0's optimizer state names
};

}  // namespace

bool is_deepspeed_checkpoint(const std::string& dir) {
  const bool universal = !path_exists(dir + "/latest") && path_exists(dir + "/latest_universal");
  auto latest = read_text_file(dir + (universal ? "/latest_universal" : "/latest"), 4096);
  if (!latest.ok()) return false;
  std::string tag = *latest;
  while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ')) tag.pop_back();
  if (!check_tag(tag).ok()) return false;
  const std::string folder = dir + "/" + tag;
  return path_exists(folder + "/mp_rank_00_model_states.pt") ||
         path_exists(folder + "/zero_pp_rank_0_mp_rank_00_model_states.pt") ||
         (universal && is_folder(folder + "/zero"));
}

Result<DeepSpeedImportResult> import_deepspeed_checkpoint(const std::string& ds_dir,
                                                          const std::string& out_dir,
                                                          const DeepSpeedImportOptions& options) {
  return Importer(ds_dir, out_dir).run(options);
}

}  // namespace dscore::checkpoint
