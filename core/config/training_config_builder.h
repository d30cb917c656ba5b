// Reading the typed TrainingConfig out of the normalised document (private
// to core/config; config.cc calls it once the document has no errors).
#pragma once

#include "core/config/json.h"
#include "core/config/training_config.h"

namespace dscore::config {

// `resolved`: validated, rules applied, batch derived. `written`: the
// document as the user wrote it (fp16's "dynamic args given" depends on
// which keys were written, not on the defaults).
TrainingConfig build_training_config(const json::Value& resolved, const json::Value& written);

}  // namespace dscore::config
