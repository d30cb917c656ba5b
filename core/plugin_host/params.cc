// Validating a plugin's params object against the schema in its descriptor
// and building the dscore_named_value views create() receives (params.h).
// Parsed schemas are cached by their text: the same plugin validated twice
// (or by two registries) parses once.
#include "core/plugin_host/params.h"

#include <map>
#include <mutex>

namespace dscore::plugin_host {
namespace {

Result<std::shared_ptr<const config::ObjectSpec>> cached_spec(const std::string& schema) {
  static std::mutex mutex;
  static auto* cache = new std::map<std::string, std::shared_ptr<const config::ObjectSpec>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache->find(schema); it != cache->end()) return it->second;
  Result<config::ObjectSpec> spec = config::parse_params_schema(schema);
  if (!spec.ok()) return spec.status();
  auto shared = std::make_shared<const config::ObjectSpec>(std::move(spec).value());
  (*cache)[schema] = shared;
  return shared;
}

bool all_numbers(const json::Value& v) {
  if (!v.is_array()) return false;
  for (const json::Value& item : v.items())
    if (!item.is_number()) return false;
  return true;
}

}  // namespace

ValidatedParams ValidatedParams::from_object(const json::Value& normalised,
                                             const json::Value& as_written,
                                             const config::ObjectSpec* spec) {
  ValidatedParams out;
  out.values_ = normalised.is_object() ? normalised : json::Value::object();
  out.raw_json_ = as_written.is_null() ? "{}" : json::serialize(as_written);
  out.build_views(spec);
  return out;
}

void ValidatedParams::build_views(const config::ObjectSpec* spec) {
  storage_.clear();
  pointers_.clear();
  strings_.clear();
  arrays_.clear();
  for (const json::Member& m : values_.members())
    add_view(m.key, m.value, spec != nullptr ? spec->find(m.key) : nullptr);
}

void ValidatedParams::add_view(const std::string& name, const json::Value& value,
                               const config::FieldSpec* field) {
  auto v = std::make_unique<dscore_named_value>();
  *v = dscore_named_value{};
  v->struct_size = sizeof(dscore_named_value);
  strings_.push_back(std::make_unique<std::string>(name));
  v->name = strings_.back()->c_str();

  auto set_string = [&](std::string text, dscore_value_type type) {
    strings_.push_back(std::make_unique<std::string>(std::move(text)));
    v->type = type;
    v->s = strings_.back()->c_str();
  };
  auto set_doubles = [&](const json::Value& array) {
    auto doubles = std::make_unique<std::vector<double>>();
    for (const json::Value& item : array.items()) doubles->push_back(item.as_number());
    v->type = DSCORE_VALUE_DOUBLE_ARRAY;
    v->doubles = doubles->data();
    v->count = doubles->size();
    arrays_.push_back(std::move(doubles));
  };

  using config::FieldType;
  const FieldType declared = field != nullptr ? field->type : FieldType::kJson;
  if (value.is_null()) {
    v->type = DSCORE_VALUE_NULL;
  } else if (field != nullptr &&
             (declared == FieldType::kJson || declared == FieldType::kObject ||
              declared == FieldType::kObjectArray || declared == FieldType::kStringArray)) {
    // Declared as structured data: always JSON text, so the plugin parses
    // one representation whatever the user wrote.
    set_string(json::serialize(value), DSCORE_VALUE_JSON);
  } else if (field != nullptr &&
             (declared == FieldType::kNumber || declared == FieldType::kNumberOrArray) &&
             value.is_number()) {
    v->type = DSCORE_VALUE_DOUBLE;  // "number": a double even when written as 1
    v->d = value.as_number();
  } else if (value.is_bool()) {
    v->type = DSCORE_VALUE_BOOL;
    v->b = value.as_bool() ? 1 : 0;
  } else if (value.is_int() || (declared == FieldType::kInt && value.is_integral())) {
    v->type = DSCORE_VALUE_INT;
    v->i = value.as_int();
    v->d = static_cast<double>(v->i);  // convenience for readers that only look at d
  } else if (value.is_number()) {
    v->type = DSCORE_VALUE_DOUBLE;
    v->d = value.as_number();
  } else if (value.is_string()) {
    set_string(value.as_string(), DSCORE_VALUE_STRING);
  } else if (all_numbers(value)) {
    set_doubles(value);
  } else {
    set_string(json::serialize(value), DSCORE_VALUE_JSON);  // objects, mixed arrays
  }
  pointers_.push_back(v.get());
  storage_.push_back(std::move(v));
}

ValidatedParams validate_params(const PluginInfo& plugin, const json::Value& params,
                                const std::string& path, const config::AutoResolver& resolve_auto,
                                std::vector<config::ConfigError>* errors,
                                std::vector<config::ConfigNotice>* notices) {
  if (!params.is_null() && !params.is_object()) {
    errors->push_back({path, params.location,
                       std::string("must be an object of ") + plugin.display() +
                           "'s parameters, not " + json::type_name(params.type())});
    return ValidatedParams::from_object(json::Value::object(), json::Value::object());
  }
  if (plugin.params_schema.empty())  // the plugin validates its own params
    return ValidatedParams::from_object(params, params);

  Result<std::shared_ptr<const config::ObjectSpec>> spec = cached_spec(plugin.params_schema);
  if (!spec.ok()) {
    errors->push_back({path, params.location,
                       plugin.display() + " has an invalid params_schema (a bug in the plugin): " +
                           spec.status().message()});
    return ValidatedParams::from_object(params, params);
  }
  json::Value normalised =
      config::validate_object(params, **spec, path, resolve_auto, {errors, notices});
  return ValidatedParams::from_object(normalised, params, spec->get());
}

}  // namespace dscore::plugin_host
