// Small helpers shared by the config sources (private to core/config): how a
// value is quoted in a message, and the spec lookups rules need.
#pragma once

#include <string>

#include "core/config/json.h"
#include "core/config/schema.h"

namespace dscore::config {

// The value as JSON text, cut to ~40 characters: `"5e8"`, `2.5`, `{"a": ...`.
std::string value_text(const json::Value& value);
// "<json type> <value>": `string "5e8"`, `number 2.5`.
std::string describe_value(const json::Value& value);
// A bound or count: integral values without exponent ("500000000"), others shortest.
std::string number_text(double value);
// "an int", "a list of numbers", ... for "expected ..." messages.
std::string expected_phrase(const FieldSpec& field);

// Set `key` in a validated object, keeping the members in schema order (a
// value a rule adds lands where the validator would have put it).
void set_in_schema_order(json::Value* object, const ObjectSpec& spec, const std::string& key,
                         json::Value value);

// The nested spec of an object field, or nullptr.
const ObjectSpec* child_spec(const ObjectSpec& spec, std::string_view field);

}  // namespace dscore::config
