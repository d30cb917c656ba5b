// DeepSpeed's cross-key rules, applied around the schema pass: the legacy
// forms that change a key's type (before), and the mappings and checks that
// involve more than one key (after), as DeepSpeed's own config classes make
// them, with their messages. dscore's rules about where state lives and
// what a run can do with it are placement.h's. Private to core/config.
#pragma once

#include <vector>

#include "core/config/config.h"
#include "core/config/json.h"

namespace dscore::config {

// Before validation, on the document as written: `"zero_optimization": true`
// becomes {"stage": 1, "allgather_bucket_size": <allgather_size or 5e8>}
// (false: stage 0), with a notice.
void apply_legacy_forms(json::Value* document, std::vector<ConfigNotice>* notices);

// After validation, on the normalised document (locations kept): deprecated
// keys mapped (cpu_offload, cpu_offload_param), overlap_comm's default,
// and every DeepSpeed check that spans keys.
void apply_deepspeed_rules(json::Value* resolved, std::vector<ConfigError>* errors,
                           std::vector<ConfigNotice>* notices);

}  // namespace dscore::config
