// The batch-size triad: train_batch_size = micro-batch * accumulation steps
// * data-parallel world size, derived and checked exactly as DeepSpeed does
// (docs/deepspeed-reference.md#batch-size-triad), with DeepSpeed's messages.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config/config.h"
#include "core/config/json.h"
#include "core/config/training_config.h"

namespace dscore::config {

// "Provided" = present and not null (0 counts as provided).
struct BatchInput {
  std::optional<int64_t> train_batch_size;
  std::optional<int64_t> train_micro_batch_size_per_gpu;
  std::optional<int64_t> gradient_accumulation_steps;
};

struct BatchOutcome {
  BatchConfig batch;      // the three values (meaningful when ok())
  std::string error;      // DeepSpeed's message; empty when the triad holds
  std::string error_key;  // the key the error is about ("" = the document)
  // For each derived key: its name and how it was computed ("(32 // 4) // 2").
  std::vector<std::pair<std::string, std::string>> derivations;
  bool ok() const { return error.empty(); }
};

// Pure: derive the missing keys with floor division in DeepSpeed's order,
// then run DeepSpeed's four assertions. world_size >= 1.
BatchOutcome derive_batch(const BatchInput& given, int64_t world_size);

// On the validated config: reads the three keys from `resolved` (a key
// written as "auto" was left absent by the validator and counts as not
// provided; if that leaves neither train_batch_size nor the micro-batch
// size, the micro-batch size is 1), writes all three back, and reports
// DeepSpeed's error with the key's position, or a notice for each "auto".
// Does nothing when a batch key already has a validation error.
void resolve_batch(const json::Value& written, json::Value* resolved, int64_t world_size,
                   std::vector<ConfigError>* errors, std::vector<ConfigNotice>* notices);

}  // namespace dscore::config
