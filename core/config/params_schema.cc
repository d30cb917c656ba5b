// parse_params_schema: a plugin's params_schema JSON text (format documented
// on dscore_plugin_descriptor::params_schema in sdk/include/dscore/plugin.h)
// into an ObjectSpec for the validator. A malformed schema is the plugin's
// bug: the message names the parameter and the attribute at fault.
#include <map>

#include "core/base/strings.h"
#include "core/config/auto_rules.h"
#include "core/config/schema.h"
#include "core/config/schema_util.h"

namespace dscore::config {

namespace {

const std::map<std::string, FieldType>& type_names() {
  // "string_array" is beyond the documented list; accepted because the
  // validator supports it.
  static const std::map<std::string, FieldType> kTypes = {
      {"bool", FieldType::kBool},
      {"int", FieldType::kInt},
      {"number", FieldType::kNumber},
      {"string", FieldType::kString},
      {"number_array", FieldType::kNumberArray},
      {"number_or_array", FieldType::kNumberOrArray},
      {"string_array", FieldType::kStringArray},
      {"json", FieldType::kJson},
  };
  return kTypes;
}

const std::vector<std::string>& attribute_names() {
  static const std::vector<std::string> kNames = {"type", "default", "required", "min",   "max",
                                                  "enum", "length",  "auto",     "error", "doc"};
  return kNames;
}

bool numeric(FieldType t) {
  return t == FieldType::kInt || t == FieldType::kNumber || t == FieldType::kNumberArray ||
         t == FieldType::kNumberOrArray;
}

bool is_array_type(FieldType t) {
  return t == FieldType::kNumberArray || t == FieldType::kNumberOrArray ||
         t == FieldType::kStringArray;
}

Status bad(const std::string& param, const std::string& what) {
  return invalid_argument("params_schema: parameter \"" + param + "\": " + what);
}

Result<FieldSpec> parse_field(const std::string& name, const json::Value& attrs) {
  if (!attrs.is_object())
    return bad(name,
               "expected an object such as {\"type\": \"number\"}, got " + describe_value(attrs));
  FieldSpec f;
  f.name = name;
  const json::Value* type = attrs.find("type");
  if (!type) return bad(name, "missing \"type\"");
  if (!type->is_string() || !type_names().count(type->as_string())) {
    std::vector<std::string> names;
    for (const auto& [n, t] : type_names()) names.push_back(n);
    std::string got = type->is_string() ? type->as_string() : value_text(*type);
    return bad(name, "unknown type \"" + got + "\" (one of " + join(names, ", ") + ")" +
                         (type->is_string() ? did_you_mean_suffix(got, names) : ""));
  }
  f.type = type_names().at(type->as_string());

  for (const json::Member& m : attrs.members()) {
    const std::string& a = m.key;
    const json::Value& v = m.value;
    if (a == "type" || a == "default") continue;
    if (a == "required") {
      if (!v.is_bool()) return bad(name, "\"required\" must be true or false");
      f.required = v.as_bool();
    } else if (a == "min" || a == "max") {
      if (!v.is_number())
        return bad(name, "\"" + a + "\" must be a number, got " + describe_value(v));
      if (!numeric(f.type)) return bad(name, "\"" + a + "\" applies only to numeric types");
      (a == "min" ? f.min : f.max) = v.as_number();
    } else if (a == "enum") {
      if (f.type != FieldType::kString && f.type != FieldType::kStringArray)
        return bad(name, "\"enum\" applies only to strings");
      if (!v.is_array() || v.items().empty())
        return bad(name, "\"enum\" must be a non-empty list of strings");
      for (const json::Value& item : v.items()) {
        if (!item.is_string()) return bad(name, "\"enum\" must be a list of strings");
        f.enum_values.push_back(item.as_string());
      }
    } else if (a == "length") {
      if (!is_array_type(f.type)) return bad(name, "\"length\" applies only to arrays");
      if (!v.is_integral() || v.as_int() < 0)
        return bad(name, "\"length\" must be a non-negative int");
      f.length = static_cast<size_t>(v.as_int());
    } else if (a == "auto") {
      if (!v.is_string() || !is_known_auto_rule(v.as_string())) {
        std::vector<std::string> rules;
        for (const AutoRuleInfo& r : auto_rules()) rules.push_back(r.name);
        std::string got = v.is_string() ? v.as_string() : value_text(v);
        return bad(name, "unknown auto rule \"" + got + "\" (one of " + join(rules, ", ") + ")" +
                             (v.is_string() ? did_you_mean_suffix(got, rules) : ""));
      }
      f.auto_rule = v.as_string();
    } else if (a == "error" || a == "doc") {
      if (!v.is_string()) return bad(name, "\"" + a + "\" must be a string");
      (a == "error" ? f.error : f.doc) = v.as_string();
    } else {
      return bad(name, "unknown schema attribute \"" + a + "\"" +
                           did_you_mean_suffix(a, attribute_names()));
    }
  }
  if (f.min && f.max && *f.min > *f.max) return bad(name, "\"min\" is greater than \"max\"");

  if (const json::Value* def = attrs.find("default")) {
    if (f.required) return bad(name, "a required parameter cannot have a default");
    // The default must pass the parameter's own checks.
    std::vector<ConfigError> errors;
    ObjectSpec probe;
    probe.fields.push_back(f);
    probe.fields.back().default_value = *def;
    json::Value doc = json::Value::object();
    doc.set(name, *def);
    // A default of "auto" is the literal string (see FieldSpec::auto_rule),
    // so it must suit the type like any other default.
    validate_object(doc, probe, "", AutoResolver(), ValidationSink{&errors, nullptr});
    if (!errors.empty())
      return bad(name, "default " + value_text(*def) + " is invalid: " + errors[0].message);
    f.default_value = *def;
    if (f.type == FieldType::kInt) f.default_value = json::Value(def->as_int());
  }
  return f;
}

}  // namespace

Result<ObjectSpec> parse_params_schema(std::string_view schema_json) {
  auto parsed = json::parse(schema_json, "params_schema");
  if (!parsed.ok())
    return invalid_argument("params_schema is not valid JSON: " + parsed.status().message());
  const json::Value& root = *parsed;
  if (!root.is_object())
    return invalid_argument(
        "params_schema must be a JSON object mapping each parameter to its description, got " +
        describe_value(root));
  ObjectSpec spec;
  for (const json::Member& m : root.members()) {
    auto field = parse_field(m.key, m.value);
    if (!field.ok()) return field.status();
    spec.fields.push_back(std::move(*field));
  }
  return spec;
}

}  // namespace dscore::config
