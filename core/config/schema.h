// The schema machinery: a declarative description of an object's keys
// (type, default, bounds, aliases, "auto" rule) and one validator that
// checks a JSON value against it, fills defaults, resolves "auto" and reports
// unknown keys with a did-you-mean suggestion. The DeepSpeed schema
// (deepspeed_schema.cc) and every plugin's params schema (JSON text from its
// descriptor, parsed by parse_params_schema) go through the same validator.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/json.h"

namespace dscore::config {

enum class FieldType {
  kBool,
  kInt,     // JSON integer, or a float with an integral value (5e8)
  kNumber,  // int or float
  kString,
  kNumberArray,
  kNumberOrArray,  // a number, or a list of numbers (per param group)
  kStringArray,
  kObject,       // validated by `object`
  kJson,         // anything, not validated ("auto" included: it is kept as written)
  kObjectArray,  // a list of objects, each validated by `object`
};

const char* field_type_name(FieldType type);  // "bool", "int", "number", ...

struct ObjectSpec;
struct FieldBinding;  // config_binding.h: the TrainingConfig member a DeepSpeed key fills

struct FieldSpec {
  std::string name;
  FieldType type = FieldType::kJson;
  std::optional<json::Value> default_value;  // filled when absent (nullopt: stays absent)
  bool required = false;
  bool nullable = false;                 // null accepted and treated as absent
  std::optional<double> min, max;        // inclusive bounds (int, number, arrays' items)
  std::vector<std::string> enum_values;  // allowed strings
  bool enum_case_insensitive = false;    // matched ignoring case, stored as listed
  std::optional<size_t> length;          // exact array length
  std::string auto_rule;                 // "" = "auto" rejected; else a rule name (auto_rules.h).
                                         // A kJson field, or one whose default is "auto",
                                         // takes "auto" literally instead.
  std::string error;                     // non-empty: the key is rejected with this message
  ErrorKind error_kind = ErrorKind::kInvalid;  // the kind of that rejection
  std::vector<std::string> aliases;            // other spellings; giving two of them is an error
  std::string deprecated;                    // non-empty: deprecation message (the key still works)
  std::shared_ptr<const ObjectSpec> object;  // for kObject and kObjectArray
  std::string doc;                           // one line for the reference and messages

  // --- added after the first draft (all optional)
  // For a deprecated key: the field of the same object that replaces it.
  // Giving both is an error (DeepSpeed's "Cannot provide deprecated
  // parameter ..."). With `rename`, the value moves to the replacement as is;
  // otherwise it is kept under its own name for a rule to map.
  std::string replaced_by;
  bool rename = false;
  // Appended to "\"auto\" is not accepted here" (what DeepSpeed would do
  // with it, and what to give instead).
  std::string auto_note;
  // Replaces the generic message for a value outside enum_values; "{}" is
  // replaced by the value as written (DeepSpeed's own wording).
  std::string enum_message;
  // DeepSpeed reads it but dscore does not act on it: a notice when given.
  bool not_used = false;
  // The ds_config.json schema only: the TrainingConfig member this key
  // fills (build_training_config). Plugin params schemas leave it empty.
  std::shared_ptr<const FieldBinding> binding;
  // A DeepSpeed feature dscore does not implement: when the key turns it on,
  // an ErrorKind::kUnsupported error saying what the feature does in
  // DeepSpeed and what to do instead. The feature is on when `switch_key`
  // (a member of the object: "enabled") is true, or for a numeric switch (a
  // parallel degree: "autotp_size") above 1; for an object without one,
  // when the object is given; for a scalar, when it differs from its
  // default (or is given at all, without a default).
  std::string unsupported_what;  // "DeepSpeed's 1-bit compression of ..."
  std::string unsupported_fix;   // "remove the section", "use fp16 or bf16"
  std::string switch_key;
};

struct ObjectSpec {
  std::vector<FieldSpec> fields;
  // Accept keys not listed (DeepSpeed sections dscore only names, like
  // "autotuning"): they are kept as written and reported as a notice.
  bool allow_unknown = false;
  // With allow_unknown: the unknown keys belong to someone else who
  // validates them (the model plugin's schema), so no notice.
  bool quiet_unknown = false;
  std::string doc;
  const FieldSpec* find(std::string_view name_or_alias) const;
};

// Resolves "auto" for a field whose auto_rule is set. Returns the value and
// a human explanation ("hidden_size^2 = 65536"), or an error message.
// A resolution with no value and no error leaves the key absent (the batch
// keys: the batch-triad rule derives them afterwards; "default" for a field
// without a default).
struct AutoResolution {
  std::optional<json::Value> value;
  std::string explanation;  // printed at start-up
  std::string error;        // non-empty when the rule cannot resolve here
};
using AutoResolver = std::function<AutoResolution(const std::string& rule, const FieldSpec& field,
                                                  const std::string& path)>;

struct ValidationSink {
  std::vector<ConfigError>* errors;
  std::vector<ConfigNotice>* notices;
};

// Validate `value` (an object, or null = empty) at JSON path `path` against
// `spec`. Returns the normalised object: canonical key names, defaults
// filled, "auto" resolved, ints as ints. Problems go to sink; the returned
// value is still as complete as possible.
json::Value validate_object(const json::Value& value, const ObjectSpec& spec,
                            const std::string& path, const AutoResolver& resolve_auto,
                            ValidationSink sink);

// Parse a plugin's params_schema JSON text (the format documented in
// sdk/include/dscore/plugin.h) into an ObjectSpec. The error names what in
// the schema text is wrong.
Result<ObjectSpec> parse_params_schema(std::string_view schema_json);

// "a.b" / "a[3]" path helpers.
std::string join_path(const std::string& parent, const std::string& key);

}  // namespace dscore::config
