// dscore's checkpoint format: DeepSpeed's folder shape with safetensors
// files (docs/architecture.md#checkpoint, docs/deepspeed-reference.md#checkpoints).
//
//   <dir>/latest                         the tag of the newest complete save
//   <dir>/<tag>/mp_rank_00_model_states.safetensors            stages 0-2: rank 0, every parameter
//   <dir>/<tag>/mp_rank_TT_model_states.safetensors            tensor parallelism: part TT's
//   <dir>/<tag>/zero_pp_rank_R_mp_rank_00_model_states.safetensors   stage 3: each rank its shards
//   <dir>/<tag>/[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.safetensors   each rank
//   <dir>/<tag>/pipe_stage_SS_model_states.safetensors    pipelines: stage SS > 0's parameters
//
// Every tensor is a FRAGMENT: a run of one parameter's elements, padding
// stripped. Model-states files hold the parameters as the model stores them
// (slot "param", model dtype); optim-states files the fp32 master weights
// (slot "fp32", tensors "fp32/<param>") and each optimizer state slot
// ("<slot>/<param>"), as this rank owned them. Each file's "dscore"
// metadata (JSON) says which fragment each tensor is; the model-states
// files also carry the training state. Because fragments name parameters
// and element ranges, any world size and stage can read any other's files.
// Under tensor parallelism a rank's part of a tensor is saved as the
// fragments of the WHOLE tensor it covers (element ranges of the whole
// tensor, which the saved layout lists), so any tensor-parallel size reads
// any other's files too.
#pragma once

#include <dscore/plugin.h>
#include <dscore/cpp/tensor_split.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/checkpoint/safetensors.h"
#include "core/config/json.h"

namespace dscore::checkpoint {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kLatestName = "latest";
inline constexpr const char* kParamSlot = "param";
inline constexpr const char* kMasterSlot = "fp32";
inline constexpr const char* kOptimizerExtraTensor = "__optimizer_extra_state__";
inline constexpr const char* kSchedulerExtraTensor = "__scheduler_extra_state__";

// mp_rank: the tensor-parallel part (DeepSpeed's model-parallel rank) whose
// first data-parallel rank wrote the file; 0 without tensor parallelism.
std::string model_states_name(int zero_stage, int rank, int mp_rank = 0);
// A pipeline's model states: stage 0's are model_states_name's (with the
// training state), stage s > 0's, written by its first data-parallel rank,
// are pipe_stage_<s>_model_states.safetensors (two digits at least); with
// tensor parallelism (mp_size > 1) one per part,
// pipe_stage_<s>_mp_rank_<m>_model_states.safetensors.
std::string pipe_model_states_name(int pipe_stage, int mp_rank = 0, int mp_size = 1);
// Below stage 3 under expert parallelism, expert rank e > 0's experts (its
// first data-parallel replica writes them; rank 0's file has expert rank
// 0's): expp_rank_<e>_mp_rank_00_model_states.safetensors.
std::string expert_model_states_name(int expert_rank);
std::string optim_states_name(bool bf16, int rank, int mp_rank = 0);
std::string default_tag(int64_t global_steps);  // "global_step<N>"
// A tag must be usable as one folder name.
Status check_tag(const std::string& tag);

// Where one tensor of a file sits in a parameter.
struct Fragment {
  std::string tensor;
  std::string param;
  std::string slot;   // kParamSlot, kMasterSlot, or an optimizer slot name
  int64_t begin = 0;  // first parameter element
  int64_t numel = 0;  // parameter elements (the tensor holds numel x elements_per_param)
  // Tensor parallelism: a run of a tensor-parallel PART of the parameter,
  // whose shape is part_shape and which sits in the whole parameter as
  // `split` says (model.h's tp_* fields); begin and numel are then the
  // part's elements. Not split: begin and numel are the parameter's.
  sdk::TensorSplit split = {};
  std::vector<int64_t> part_shape = {};
};

// What every file says about itself (its "dscore" metadata).
struct FileHeader {
  std::string kind;  // "model_states" | "optim_states"
  std::string tag;
  std::string checkpoint_id;  // the same in every file of one save
  int rank = 0;
  int world_size = 1;
  int zero_stage = 0;
  std::vector<Fragment> fragments;
  json::Value state;  // model-states files: the training state; else null
};

std::map<std::string, std::string> header_metadata(const FileHeader& header);
Result<FileHeader> parse_header(const SafetensorsReader& file);

// A parameter as the checkpoint's layout lists it.
struct SavedParam {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

// The fragments of one save, indexed by (slot, parameter), read with
// checksums: each tensor is verified the first time any part of it is read.
class FragmentSet {
 public:
  // Opens the files (NOT_FOUND naming a missing one) and checks they come
  // from the same save.
  static Result<FragmentSet> open(const std::string& folder, const std::vector<std::string>& names);

  const std::vector<FileHeader>& headers() const { return headers_; }
  const std::vector<SafetensorsReader>& files() const { return files_; }
  // Every element of every listed parameter is present exactly once in
  // `slot` (DATA_LOSS naming the gap, the parameter and the files otherwise).
  Status check_complete(const std::string& slot, const std::vector<SavedParam>& params) const;
  bool has_slot(const std::string& slot) const;
  // dtype of `slot` for `param` (INVALID when absent).
  dscore_dtype dtype_of(const std::string& slot, const std::string& param) const;

  // Elements [begin, begin + count) of `param` in `slot`, each
  // `elements_per_param` stored values wide, into dst as `dst_dtype`
  // (float dtypes convert; others must match); NOT_FOUND when some of them
  // are in none of the files.
  Status read(const std::string& slot, const std::string& param, int64_t begin, int64_t count,
              uint32_t elements_per_param, dscore_dtype dst_dtype, void* dst);

 private:
  // A run of a fragment that lies consecutively in the whole parameter
  // (a split fragment is several): whole elements [begin, begin + numel)
  // are the fragment tensor's from `offset` on.
  struct Piece {
    size_t file = 0;
    const TensorInfo* tensor = nullptr;
    int64_t begin = 0, numel = 0;
    int64_t offset = 0;              // in the fragment's elements
    int64_t fragment_numel = 0;      // the fragment's elements
    std::shared_ptr<bool> verified;  // the tensor's checksum checked (shared by its pieces)
  };
  Status read_piece(Piece& piece, int64_t from, int64_t count, uint32_t epp, dscore_dtype dst_dtype,
                    char* dst);

  std::vector<SafetensorsReader> files_;
  std::vector<FileHeader> headers_;
  std::map<std::pair<std::string, std::string>, std::vector<Piece>> pieces_;  // sorted by begin
};

// "[2, 3]", for messages.
std::string shape_text(const std::vector<int64_t>& shape);

// Copy `count` values of `from` into `to` (fp32/fp16/bf16 convert).
Status convert_values(const void* src, dscore_dtype from, void* dst, dscore_dtype to,
                      int64_t count);

}  // namespace dscore::checkpoint
