// `dscore zero-to-fp32`: a checkpoint's fp32 master weights, whatever the
// world size and stage that saved them, as a HuggingFace-style
// model.safetensors (or model-0000i-of-0000n.safetensors shards and
// model.safetensors.index.json past max_shard_bytes). Streams: each tensor
// is assembled from its fragments, written, and dropped, so memory stays at
// one tensor (DeepSpeed's zero_to_fp32.py holds the whole model).
// `dscore export-hf` writes the same files in a model's Hugging Face names,
// layouts and dtype (ConsolidateOptions::output, dtype).
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::checkpoint {

// How one parameter is written: its name in the output, and whether the
// 2-D transpose of dscore's layout is stored (GPT-2's Conv1D weights).
struct OutputTensor {
  std::string name;
  bool transpose = false;
};

struct ConsolidateOptions {
  std::string tag;                              // "" = latest
  uint64_t max_shard_bytes = 5'000'000'000ull;  // HuggingFace's "5GB"
  dscore_dtype dtype = DSCORE_DTYPE_F32;        // written as F32, BF16 or F16
  // The output name and layout of the parameter saved as `name`; unset:
  // its own name and layout.
  std::function<Result<OutputTensor>(const std::string& name)> output;
};

struct ConsolidateResult {
  std::vector<std::string> files;  // written, in order (the index last when sharded)
  uint64_t total_bytes = 0;        // tensor bytes
  size_t tensors = 0;
};

// The files are written into out_dir (created when missing), beside what
// it holds.
Result<ConsolidateResult> zero_to_fp32(const std::string& dir, const std::string& out_dir,
                                       const ConsolidateOptions& options);

// "5GB", "500MB", "2GiB", "1000" (bytes); HuggingFace's units (GB = 10^9).
Result<uint64_t> parse_size(const std::string& text);

}  // namespace dscore::checkpoint
