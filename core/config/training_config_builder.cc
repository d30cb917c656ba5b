// The normalised ds_config.json -> TrainingConfig, by the schema's bindings
// (config_binding.h): every value read here has been validated and
// defaulted by the schema already, so this file holds no default and names
// no key beyond the shape of plugin sections.
// An absent section without a default fills its struct from the section's
// own schema defaults, as if it were written as {}.
#include "core/config/training_config_builder.h"

#include "core/config/config_binding.h"
#include "core/config/deepspeed_schema.h"
#include "core/config/schema.h"

namespace dscore::config {

namespace {

// Fills the members bound to `spec`'s fields inside `target` (a `type`).
void bind_object(const json::Value& object, const ObjectSpec& spec, const std::string& path,
                 std::type_index type, void* target) {
  for (const FieldSpec& f : spec.fields) {
    if (!f.binding) continue;
    const FieldBinding& b = *f.binding;
    const std::string field_path = join_path(path, f.name);
    DSCORE_CHECK(b.owner == type, field_path + " is bound to a member of another struct");
    const json::Value* value = object.is_object() ? object.find(f.name) : nullptr;
    const bool present = value != nullptr && !value->is_null();
    if (b.assign) {
      if (present) b.assign(*value, field_path, target);
      continue;  // absent: the schema gives no default, the member stays unset
    }
    DSCORE_CHECK(b.open && f.object, field_path + " is bound as a section but has no object spec");
    void* section = b.open(target, present);
    if (section == nullptr) continue;  // an optional section left out
    if (present) {
      bind_object(*value, *f.object, field_path, b.section, section);
    } else {
      // The section's defaults, exactly as the validator fills a written {}.
      const json::Value defaults = validate_object(json::Value::object(), *f.object, field_path,
                                                   AutoResolver(), {nullptr, nullptr});
      bind_object(defaults, *f.object, field_path, b.section, section);
    }
  }
}

// A plugin's params: the object as written, or {} placed at the section.
json::Value params_or_empty(const json::Value& section) {
  const json::Value* params = section.find("params");
  if (params && params->is_object()) return *params;
  json::Value empty = json::Value::object();
  empty.location = section.location;
  return empty;
}

std::string type_of(const json::Value& section) {
  const json::Value* type = section.find("type");
  return type && type->is_string() ? type->as_string() : std::string();
}

}  // namespace

PluginRef plugin_ref(const json::Value& section, const std::string& path) {
  return PluginRef{type_of(section), params_or_empty(section), join_path(path, "params"),
                   section.location};
}

PluginRef model_ref(const json::Value& section, const std::string& path) {
  json::Value params = json::Value::object();
  params.location = section.location;
  for (const json::Member& m : section.members())
    if (m.key != "type") params.members().push_back(m);
  return PluginRef{type_of(section), std::move(params), path, section.location};
}

void add_monitor_section(const json::Value& section, const std::string& path,
                         std::vector<PluginRef>* monitors) {
  const json::Value* enabled = section.find("enabled");
  if (enabled == nullptr || !enabled->as_bool()) return;
  json::Value params = json::Value::object();
  params.location = section.location;
  for (const json::Member& m : section.members())
    if (m.key != "enabled" && !m.value.is_null()) params.members().push_back(m);
  // The section's name is the plugin's name and the JSON path of its params.
  monitors->push_back(PluginRef{path, std::move(params), path, section.location});
}

void add_monitor_plugins(const json::Value& list, const std::string& path,
                         std::vector<PluginRef>* monitors) {
  for (size_t i = 0; i < list.items().size(); ++i)
    monitors->push_back(plugin_ref(list.items()[i], path + "[" + std::to_string(i) + "]"));
}

TrainingConfig build_training_config(const json::Value& doc) {
  TrainingConfig c;
  bind_object(doc, deepspeed_schema(), "", typeid(TrainingConfig), &c);
  c.resolved = doc;
  return c;
}

}  // namespace dscore::config
