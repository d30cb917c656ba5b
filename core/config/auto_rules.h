// The rules that resolve "auto". A key accepts "auto" only when its schema
// names one of these rules (FieldSpec::auto_rule, or "auto" in a plugin's
// params_schema); docs/config-auto.md explains each for users.
#pragma once

#include <string_view>
#include <vector>

#include "core/config/config.h"
#include "core/config/json.h"
#include "core/config/schema.h"

namespace dscore::config {

struct AutoRuleInfo {
  const char* name;     // what a schema writes: "hidden_squared"
  const char* summary;  // one line for docs and the reference
};

// Every rule, in documentation order.
const std::vector<AutoRuleInfo>& auto_rules();
bool is_known_auto_rule(std::string_view name);

// A resolver for the rules above. `config` is the document the rules read
// (the file as written, or LoadedConfig::resolved): "train_steps",
// "optimizer.params.lr", "model.hidden_size". The resolver keeps a copy, so
// it may outlive both arguments. Thread-compatible (no shared state).
AutoResolver make_auto_resolver(const ResolveContext& context, const json::Value& config);

}  // namespace dscore::config
