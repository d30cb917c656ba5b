// The resolved config reaches write_config() as JSON text; a wandb run's
// config is one item per top-level key with the value as JSON text. This
// splits the top-level object without a JSON library (plugins carry none):
// keys are unescaped, values are kept verbatim.
#pragma once

#include <string_view>
#include <vector>

#include "records.h"

namespace dscore::wandb {

// The members of the JSON object `json`, in order. Throws sdk::Error
// (INVALID_ARGUMENT, naming the offset) when `json` is not one object.
std::vector<Item> top_level_members(std::string_view json);

}  // namespace dscore::wandb
