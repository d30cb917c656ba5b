// Reading the typed TrainingConfig out of the normalised document (private
// to core/config; config.cc calls it once the document has no errors).
#pragma once

#include "core/config/json.h"
#include "core/config/training_config.h"

namespace dscore::config {

// `resolved`: validated, rules applied, batch derived.
TrainingConfig build_training_config(const json::Value& resolved);

}  // namespace dscore::config
