// `dscore export-hf`: a checkpoint as a Hugging Face model folder that
// transformers' from_pretrained loads — config.json, the weights in the
// model plugin's Hugging Face names and layouts (model.safetensors, or
// shards and model.safetensors.index.json past max_shard_bytes, as
// save_pretrained writes them), and the tokenizer files of the run's
// from_pretrained folder. The model plugin owns the mapping (model.h
// hf_tensor, hf_config); the weights stream one tensor at a time
// (checkpoint/consolidate.h).
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/checkpoint/consolidate.h"

namespace dscore {

struct HfExportOptions {
  std::string tag;                              // "" = latest
  uint64_t max_shard_bytes = 5'000'000'000ull;  // transformers' "5GB"
  dscore_dtype dtype = DSCORE_DTYPE_F32;        // F32, BF16 or F16
};

struct HfExportResult {
  std::string model;  // the model plugin, for messages
  checkpoint::ConsolidateResult weights;
  std::vector<std::string> copied;  // tokenizer files copied, as written
};

// The files transformers keeps beside a model that describe its tokenizer
// and generation defaults; copied when present.
const std::vector<std::string>& hf_side_files();

Result<HfExportResult> export_hf(const std::string& checkpoint_dir, const std::string& out_dir,
                                 const HfExportOptions& options);

}  // namespace dscore
