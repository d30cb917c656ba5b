// DeepSpeed checkpoint export (deepspeed_export.h): the files and the
// pickled structure DeepSpeed 0.19's ZeRO-1/2 optimizer saves
// (runtime/zero/stage_1_and_2.py state_dict) and its engine reads back
// (_load_checkpoint, _load_legacy_checkpoint: a "rigid" checkpoint whose
// base optimizer state is a torch optimizer state dict).
#include "core/checkpoint/deepspeed_export.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <optional>

#include "core/base/strings.h"
#include "core/checkpoint/checkpoint_info.h"
#include "core/checkpoint/durable_file.h"
#include "core/checkpoint/format.h"
#include "core/checkpoint/torch_writer.h"

namespace dscore::checkpoint {
namespace {

// The DeepSpeed release whose layout this is (its load checks the version
// is at least 0.3.17 for stage 1).
constexpr const char* kDeepSpeedVersion = "0.19.8";
constexpr const char* kLossScaler = "deepspeed.runtime.fp16.loss_scaler";
constexpr const char* kStageEnum = "deepspeed.runtime.zero.config";
constexpr const char* kFragment = "deepspeed.utils.tensor_fragment";

void write_json(PickleWriter& p, const json::Value& v) {
  if (v.is_object()) {
    p.begin_dict();
    for (const json::Member& m : v.members()) {
      p.string(m.key);
      write_json(p, m.value);
    }
    p.end_dict();
  } else if (v.is_array()) {
    p.begin_list();
    for (const json::Value& item : v.items()) write_json(p, item);
    p.end_list();
  } else if (v.is_bool()) {
    p.boolean(v.as_bool());
  } else if (v.is_int()) {
    p.integer(v.as_int());
  } else if (v.is_number()) {
    p.real(v.as_number());
  } else if (v.is_string()) {
    p.string(v.as_string());
  } else {
    p.none();
  }
}

// The optimizer section's "params" object, or nullptr.
const json::Value* params_of(const json::Value& config) {
  const json::Value* s = config.find("optimizer");
  const json::Value* params = s != nullptr && s->is_object() ? s->find("params") : nullptr;
  return params != nullptr && params->is_object() ? params : nullptr;
}

double optimizer_number(const json::Value& config, const char* key, double fallback) {
  const json::Value* v = params_of(config) != nullptr ? params_of(config)->find(key) : nullptr;
  return v != nullptr && v->is_number() ? v->as_number() : fallback;
}

class Exporter {
 public:
  Exporter(const DeepSpeedExportOptions& options, CheckpointInfo info, std::string out)
      : options_(options), info_(std::move(info)), out_(std::move(out)) {}

  Result<DeepSpeedExportResult> run() {
    const TrainingState& st = info_.state;
    DSCORE_RETURN_IF_ERROR(check_supported());
    DSCORE_ASSIGN_OR_RETURN(optim_, FragmentSet::open(info_.path, st.optim_files));
    DSCORE_ASSIGN_OR_RETURN(model_, FragmentSet::open(info_.path, st.model_files));
    DSCORE_RETURN_IF_ERROR(optim_->check_complete(kMasterSlot, st.params));
    for (const char* slot : {"exp_avg", "exp_avg_sq"})
      DSCORE_RETURN_IF_ERROR(optim_->check_complete(slot, st.params));
    DSCORE_RETURN_IF_ERROR(model_->check_complete(kParamSlot, st.params));

    const std::string final_folder = out_ + "/" + info_.tag;
    DSCORE_RETURN_IF_ERROR(make_folders(out_));
    if (path_exists(final_folder))
      return failed_precondition(final_folder +
                                 " exists: export into another folder, or remove it");
    const std::string staging = final_folder + ".partial";
    DSCORE_RETURN_IF_ERROR(remove_tree(staging));
    DSCORE_RETURN_IF_ERROR(make_folders(staging));
    if (options_.universal) {
      DSCORE_RETURN_IF_ERROR(write_universal(staging));
    } else {
      for (int r = 0; r < options_.world_size; ++r) DSCORE_RETURN_IF_ERROR(write_rank(staging, r));
    }
    DSCORE_RETURN_IF_ERROR(write_model_states(staging));
    bool exchanged = false;
    DSCORE_RETURN_IF_ERROR(rename_or_exchange(staging, final_folder, &exchanged));
    DSCORE_RETURN_IF_ERROR(sync_folder(out_));
    DSCORE_RETURN_IF_ERROR(write_file_durably(
        out_ + "/" + (options_.universal ? "latest_universal" : kLatestName), info_.tag));
    DeepSpeedExportResult result;
    result.tag = info_.tag;
    result.files = files_;
    result.global_steps = st.counters.global_steps;
    return result;
  }

 private:
  Status check_supported() {
    const TrainingState& st = info_.state;
    if (options_.world_size < 1) return invalid_argument("--world-size must be at least 1");
    if (options_.zero_stage != 1 && options_.zero_stage != 2)
      return unimplemented("export at ZeRO stage " + std::to_string(options_.zero_stage) +
                           ": DeepSpeed's format is written for stages 1 and 2");
    if (st.model_dtype == "bf16") {
      dtype_ = DSCORE_DTYPE_BF16;
    } else if (st.model_dtype != "fp32") {
      return unimplemented(info_.path + ": a " + st.model_dtype +
                           " model: export writes fp32 and bf16 checkpoints (fp16 keeps a "
                           "dynamic loss scaler DeepSpeed pickles as its own object)");
    }
    if (to_lower(st.optimizer_type) == "muon")
      return unimplemented(info_.path +
                           ": optimizer muon: DeepSpeed keeps Muon's state in "
                           "two groups (momentum_buffer for the matrices), which "
                           "export does not write yet");
    if (st.optimizer_slot_names() != std::vector<std::string>{"exp_avg", "exp_avg_sq"})
      return unimplemented(info_.path + ": optimizer " + st.optimizer_type +
                           ": export writes the Adam family's state (exp_avg, exp_avg_sq)");
    for (const SavedParam& p : st.params) total_ += p.numel;
    const int64_t align = 2 * static_cast<int64_t>(options_.world_size);
    partition_ = (total_ + align - 1) / align * align / options_.world_size;
    return Status::Ok();
  }

  // What DeepSpeed's ZeRO-1/2 state dict holds besides tensors: the loss
  // scaler (static 1.0: fp32 and bf16), overflow and clipping.
  void write_global_state(PickleWriter& p) const {
    const json::Value* clip = info_.state.ds_config.find("gradient_clipping");
    p.string("loss_scaler").begin_object(kLossScaler, "LossScaler");
    p.string("cur_scale").real(1.0).string("dynamic").boolean(false).end_object();
    p.string("dynamic_loss_scale").boolean(false).string("overflow").boolean(false);
    p.string("clip_grad").real(clip != nullptr && clip->is_number() ? clip->as_number() : 0.0);
  }

  // The Adam param group DeepSpeed's optimizer resumes with (torch's
  // load_state_dict takes its hyperparameters from here).
  void write_param_groups(PickleWriter& p) const {
    const json::Value* params = params_of(info_.state.ds_config);
    const json::Value* bias = params != nullptr ? params->find("bias_correction") : nullptr;
    const json::Value* betas = params != nullptr ? params->find("betas") : nullptr;
    p.string("param_groups").begin_list().begin_dict();
    p.string("lr").real(options_.next_lr);
    p.string("bias_correction").boolean(bias == nullptr || !bias->is_bool() || bias->as_bool());
    p.string("betas").begin_tuple();
    for (size_t i = 0; i < 2; ++i)
      p.real(betas != nullptr && betas->is_array() && betas->items().size() == 2 &&
                     betas->items()[i].is_number()
                 ? betas->items()[i].as_number()
                 : (i == 0 ? 0.9 : 0.999));
    p.end_tuple();
    p.string("eps").real(optimizer_number(info_.state.ds_config, "eps", 1e-8));
    p.string("weight_decay").real(optimizer_number(info_.state.ds_config, "weight_decay", 0.0));
    p.string("step").integer(0);
    p.string("params").begin_list().integer(0).end_list();
    p.end_dict().end_list();
  }

  // The partitioning record: stage, this rank's padding, per-parameter
  // alignment padding (none), partition count, version.
  void write_layout(PickleWriter& p, int64_t padding, int partitions) const {
    p.string("zero_stage").begin_call(kStageEnum, "ZeroStageEnum");
    p.integer(options_.zero_stage).end_call();
    p.string("group_paddings").begin_list().integer(padding).end_list();
    p.string("param_alignment_paddings").begin_list().begin_list();
    for (size_t i = 0; i < info_.state.params.size(); ++i) p.integer(0);
    p.end_list().end_list();
    p.string("partition_count").begin_list().integer(partitions).end_list();
    p.string("ds_version").string(kDeepSpeedVersion);
  }

  // ds_to_universal.py's layout, which DeepSpeed loads at any world size
  // with "checkpoint": {"load_universal": true}: zero/<param>/{fp32,
  // exp_avg, exp_avg_sq}.pt as {'cat_dim': 0, 'param': the whole tensor},
  // zero/<param>/step.pt, and zero/optimizer_state.pt with the rest.
  Status write_universal(const std::string& staging) {
    const TrainingState& st = info_.state;
    for (const SavedParam& param : st.params) {
      const std::string folder = staging + "/zero/" + param.name;
      DSCORE_RETURN_IF_ERROR(make_folders(folder));
      std::vector<float> values(static_cast<size_t>(param.numel));
      for (const char* slot : {kMasterSlot, "exp_avg", "exp_avg_sq"}) {
        DSCORE_RETURN_IF_ERROR(
            optim_->read(slot, param.name, 0, param.numel, 1, DSCORE_DTYPE_F32, values.data()));
        const std::string name = std::string(slot) == kMasterSlot ? "fp32" : slot;
        TorchSaveWriter file(name);
        const std::string key = file.add_storage(values.data(), values.size() * sizeof(float));
        PickleWriter p;
        p.begin_dict().string("cat_dim").integer(0);
        p.string("param").tensor(key, DSCORE_DTYPE_F32, param.shape, param.numel).end_dict();
        DSCORE_RETURN_IF_ERROR(file.write(folder + "/" + name + ".pt", p.finish()));
      }
      PickleWriter step;
      step.integer(st.counters.global_steps - st.counters.skipped_steps);
      DSCORE_RETURN_IF_ERROR(TorchSaveWriter("step").write(folder + "/step.pt", step.finish()));
    }
    PickleWriter p;
    p.begin_dict();
    write_global_state(p);
    write_layout(p, 0, 1);
    write_param_groups(p);
    p.end_dict();
    DSCORE_RETURN_IF_ERROR(
        TorchSaveWriter("optimizer_state").write(staging + "/zero/optimizer_state.pt", p.finish()));
    files_.push_back("zero/ (" + std::to_string(st.params.size()) + " parameters)");
    return Status::Ok();
  }

  Status write_rank(const std::string& staging, int rank) {
    const TrainingState& st = info_.state;
    const int64_t begin = static_cast<int64_t>(rank) * partition_;
    const int64_t owned = std::clamp<int64_t>(total_ - begin, 0, partition_);
    std::vector<float> fp32(static_cast<size_t>(owned));
    std::vector<float> m(static_cast<size_t>(partition_), 0.0f), v = m;
    struct Mapping {
      std::string name;
      int64_t numel, start;
    };
    std::vector<Mapping> mappings;
    int64_t offset = 0;
    for (const SavedParam& p : st.params) {
      const int64_t lo = std::max(offset, begin), hi = std::min(offset + p.numel, begin + owned);
      if (lo < hi) {
        const int64_t at = lo - begin, element = lo - offset, count = hi - lo;
        DSCORE_RETURN_IF_ERROR(
            optim_->read(kMasterSlot, p.name, element, count, 1, DSCORE_DTYPE_F32, &fp32[at]));
        DSCORE_RETURN_IF_ERROR(
            optim_->read("exp_avg", p.name, element, count, 1, DSCORE_DTYPE_F32, &m[at]));
        DSCORE_RETURN_IF_ERROR(
            optim_->read("exp_avg_sq", p.name, element, count, 1, DSCORE_DTYPE_F32, &v[at]));
        mappings.push_back({p.name, count, at});
      }
      offset += p.numel;
    }
    const bool bf16 = dtype_ == DSCORE_DTYPE_BF16;
    const std::string stem = std::string(bf16 ? "bf16_" : "") + "zero_pp_rank_" +
                             std::to_string(rank) + "_mp_rank_00_optim_states";
    TorchSaveWriter file(stem);
    const std::string fp32_key = file.add_storage(fp32.data(), fp32.size() * sizeof(float));
    const std::string m_key = file.add_storage(m.data(), m.size() * sizeof(float));
    const std::string v_key = file.add_storage(v.data(), v.size() * sizeof(float));
    const json::Value& config = st.ds_config;
    PickleWriter p;
    p.begin_dict().string("optimizer_state_dict").begin_dict();
    write_global_state(p);
    // The torch optimizer state dict of DeepSpeed's Adam: one flat tensor per group.
    p.string("base_optimizer_state").begin_dict().string("state").begin_dict();
    p.integer(0).begin_dict();
    p.string("step").integer(st.counters.global_steps - st.counters.skipped_steps);
    p.string("exp_avg").tensor(m_key, DSCORE_DTYPE_F32, {partition_}, partition_);
    p.string("exp_avg_sq").tensor(v_key, DSCORE_DTYPE_F32, {partition_}, partition_);
    p.end_dict().end_dict();
    write_param_groups(p);
    p.end_dict();
    p.string("single_partition_of_fp32_groups").begin_list();
    p.tensor(fp32_key, DSCORE_DTYPE_F32, {owned}, owned).end_list();
    write_layout(p, std::max<int64_t>(0, begin + partition_ - std::max(total_, begin)),
                 options_.world_size);
    p.string("param_slice_mappings").begin_list().begin_ordered_dict();
    for (const Mapping& map : mappings) {
      p.string(map.name).begin_object(kFragment, "fragment_address");
      p.string("numel").integer(map.numel).string("start").integer(map.start).end_object();
    }
    p.end_dict().end_list();
    p.end_dict();
    p.string("ds_config");
    write_json(p, config);
    p.string("ds_version").string(kDeepSpeedVersion).end_dict();
    DSCORE_RETURN_IF_ERROR(file.write(staging + "/" + stem + ".pt", p.finish()));
    files_.push_back(stem + ".pt");
    return Status::Ok();
  }

  Status write_model_states(const std::string& staging) {
    const TrainingState& st = info_.state;
    const std::string stem = "mp_rank_00_model_states";
    TorchSaveWriter file(stem);
    const size_t width = sdk::dtype_size(dtype_);
    PickleWriter p;
    p.begin_dict().string("module").begin_ordered_dict();
    std::vector<std::string> weights;  // alive until the file is written
    weights.reserve(st.params.size());
    for (const SavedParam& param : st.params) {
      weights.emplace_back(static_cast<size_t>(param.numel) * width, '\0');
      DSCORE_RETURN_IF_ERROR(
          model_->read(kParamSlot, param.name, 0, param.numel, 1, dtype_, weights.back().data()));
      const std::string key = file.add_storage(weights.back().data(), weights.back().size());
      p.string(param.name).tensor(key, dtype_, param.shape, param.numel);
    }
    p.end_dict();
    p.string("buffer_names").begin_list().end_list();
    p.string("optimizer").none();
    p.string("param_shapes").begin_list().begin_ordered_dict();
    for (const SavedParam& param : st.params) p.string(param.name).size(param.shape);
    p.end_dict().end_list();
    p.string("frozen_param_shapes").none();
    p.string("shared_params").begin_dict().end_dict();
    p.string("frozen_param_fragments").none();
    p.string("lr_scheduler");
    if (st.ds_config.find("scheduler") != nullptr)
      p.begin_dict().string("last_batch_iteration").integer(st.lr_last_batch_iteration).end_dict();
    else
      p.none();
    p.string("data_sampler").none().string("random_ltd").none();
    p.string("skipped_steps").integer(st.counters.skipped_steps);
    p.string("global_steps").integer(st.counters.global_steps);
    p.string("global_samples").integer(st.counters.global_samples);
    p.string("dp_world_size").integer(options_.world_size);
    p.string("mp_world_size").integer(1);
    p.string("checkpoint_parallel_dimensions").begin_dict();
    p.string("pp_degree").integer(1).string("tp_degree").integer(1).end_dict();
    p.string("ds_config");
    write_json(p, st.ds_config);
    p.string("ds_version").string(kDeepSpeedVersion).end_dict();
    DSCORE_RETURN_IF_ERROR(file.write(staging + "/" + stem + ".pt", p.finish()));
    files_.push_back(stem + ".pt");
    return Status::Ok();
  }

  const DeepSpeedExportOptions options_;
  CheckpointInfo info_;
  std::string out_;
  std::optional<FragmentSet> optim_, model_;
  dscore_dtype dtype_ = DSCORE_DTYPE_F32;
  int64_t total_ = 0, partition_ = 0;
  std::vector<std::string> files_;
};

}  // namespace

Result<DeepSpeedExportResult> export_deepspeed_checkpoint(const std::string& dir,
                                                          const std::string& out_dir,
                                                          const DeepSpeedExportOptions& options) {
  DSCORE_ASSIGN_OR_RETURN(CheckpointInfo info, open_checkpoint(dir, options.tag));
  return Exporter(options, std::move(info), out_dir).run();
}

}  // namespace dscore::checkpoint
