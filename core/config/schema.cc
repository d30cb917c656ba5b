// The generic validator: checks a JSON object against an ObjectSpec (types,
// bounds, enums, aliases, deprecations, "auto", required keys, unknown keys
// with a did-you-mean) and returns the normalised object. Used for the whole
// ds_config.json and for every plugin's params.
#include "core/config/schema.h"

#include <cmath>
#include <cstdio>

#include "core/base/strings.h"
#include "core/config/schema_util.h"

namespace dscore::config {

const char* field_type_name(FieldType type) {
  switch (type) {
    case FieldType::kBool:
      return "bool";
    case FieldType::kInt:
      return "int";
    case FieldType::kNumber:
      return "number";
    case FieldType::kString:
      return "string";
    case FieldType::kNumberArray:
      return "number_array";
    case FieldType::kNumberOrArray:
      return "number_or_array";
    case FieldType::kStringArray:
      return "string_array";
    case FieldType::kObject:
      return "object";
    case FieldType::kJson:
      return "json";
    case FieldType::kObjectArray:
      return "object_array";
  }
  return "?";
}

const FieldSpec* ObjectSpec::find(std::string_view name_or_alias) const {
  for (const FieldSpec& f : fields) {
    if (f.name == name_or_alias) return &f;
    for (const std::string& a : f.aliases)
      if (a == name_or_alias) return &f;
  }
  return nullptr;
}

std::string join_path(const std::string& parent, const std::string& key) {
  if (parent.empty()) return key;
  if (!key.empty() && key[0] == '[') return parent + key;
  return parent + "." + key;
}

// ---------------------------------------------------------------- helpers

std::string value_text(const json::Value& value) {
  std::string text = json::serialize(value);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

std::string describe_value(const json::Value& value) {
  if (value.is_null()) return "null";
  return std::string(json::type_name(value.type())) + " " + value_text(value);
}

std::string number_text(double value) {
  if (std::trunc(value) == value && std::fabs(value) < 1e18) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(value));
    return buf;
  }
  return format_double(value);
}

std::string expected_phrase(const FieldSpec& field) {
  switch (field.type) {
    case FieldType::kBool:
      return "a bool (true or false)";
    case FieldType::kInt:
      return "an int";
    case FieldType::kNumber:
      return "a number";
    case FieldType::kString:
      return "a string";
    case FieldType::kNumberArray:
      return "a list of numbers";
    case FieldType::kNumberOrArray:
      return "a number or a list of numbers";
    case FieldType::kStringArray:
      return "a list of strings";
    case FieldType::kObject:
      return "an object";
    case FieldType::kJson:
      return "any JSON value";
    case FieldType::kObjectArray:
      return "a list of objects";
  }
  return "?";
}

void set_in_schema_order(json::Value* object, const ObjectSpec& spec, const std::string& key,
                         json::Value value) {
  if (json::Value* existing = object->find(key)) {
    *existing = std::move(value);
    return;
  }
  auto rank = [&](const std::string& name) {
    for (size_t i = 0; i < spec.fields.size(); ++i)
      if (spec.fields[i].name == name) return i;
    return spec.fields.size();  // unknown keys stay last
  };
  const size_t mine = rank(key);
  auto& members = object->members();
  auto it = members.begin();
  while (it != members.end() && rank(it->key) <= mine) ++it;
  members.insert(it, json::Member{key, {}, std::move(value)});
}

const ObjectSpec* child_spec(const ObjectSpec& spec, std::string_view field) {
  const FieldSpec* f = spec.find(field);
  return f ? f->object.get() : nullptr;
}

namespace {

// "[3]". (Built without `"[" + std::to_string(i)`, which trips GCC 12's
// -Wrestrict false positive at -O3.)
std::string index_key(size_t i) {
  std::string key = "[";
  key += std::to_string(i);
  key += ']';
  return key;
}

std::string quoted_list(const std::vector<std::string>& values) {
  std::vector<std::string> q;
  for (const std::string& v : values) q.push_back("\"" + v + "\"");
  return join(q, ", ");
}

std::string bounds_message(const FieldSpec& f, double x) {
  std::string got = ", got " + number_text(x);
  if (f.min && f.max)
    return "must be between " + number_text(*f.min) + " and " + number_text(*f.max) + got;
  if (f.min) return "must be >= " + number_text(*f.min) + got;
  return "must be <= " + number_text(*f.max) + got;
}

// Whether a validated value of an unsupported-feature key turns the feature
// on (FieldSpec::switch_key).
bool feature_on(const FieldSpec& f, const json::Value& v) {
  if (v.is_null()) return false;
  if (!f.switch_key.empty()) {
    const json::Value* on = v.is_object() ? v.find(f.switch_key) : nullptr;
    if (on && on->is_number()) return on->as_number() > 1;  // a degree: autotp_size
    return on && !on->is_null() && !(on->is_bool() && !on->as_bool());
  }
  if (f.type == FieldType::kObject || !f.default_value) return true;
  return json::serialize(v) != json::serialize(*f.default_value);
}

std::string unsupported_message(const FieldSpec& f) {
  return "not implemented by dscore: " + f.unsupported_what + ". " + f.unsupported_fix +
         std::string(kUnsupportedHint);
}

class Validator {
 public:
  Validator(const AutoResolver& resolve_auto, ValidationSink sink)
      : resolve_auto_(resolve_auto), sink_(sink) {}

  json::Value object(const json::Value& value, const ObjectSpec& spec, const std::string& path);

 private:
  void error(const std::string& path, json::Location where, std::string message,
             ErrorKind kind = ErrorKind::kInvalid) {
    if (sink_.errors) sink_.errors->push_back(ConfigError{path, where, std::move(message), kind});
  }
  void notice(const std::string& path, std::string message) {
    if (sink_.notices) sink_.notices->push_back(ConfigNotice{path, std::move(message)});
  }

  std::optional<json::Value> field(const json::Value& v, const FieldSpec& f,
                                   const std::string& path);
  std::optional<json::Value> resolve(const json::Value& v, const FieldSpec& f,
                                     const std::string& path);
  std::optional<json::Value> check(const json::Value& v, const FieldSpec& f,
                                   const std::string& path);
  bool number_ok(const json::Value& v, const FieldSpec& f, const std::string& path);
  std::optional<json::Value> number_array(const json::Value& v, const FieldSpec& f,
                                          const std::string& path);
  std::optional<json::Value> enum_value(const json::Value& v, const FieldSpec& f,
                                        const std::string& path);
  void type_error(const json::Value& v, const FieldSpec& f, const std::string& path) {
    error(path, v.location, "expected " + expected_phrase(f) + ", got " + describe_value(v));
  }

  const AutoResolver& resolve_auto_;
  ValidationSink sink_;
};

json::Value Validator::object(const json::Value& value, const ObjectSpec& spec,
                              const std::string& path) {
  json::Value out = json::Value::object();
  out.location = value.location;
  static const json::Value kEmpty = json::Value::object();
  const json::Value& in = value.is_object() ? value : kEmpty;

  // Which member gives each field; `via` is the spec of the key as written
  // (differs from the slot's field for a deprecated key renamed into it).
  struct Slot {
    const json::Member* member = nullptr;
    const FieldSpec* via = nullptr;
  };
  std::vector<Slot> slots(spec.fields.size());
  std::vector<const json::Member*> unknown;
  auto index_of = [&](const FieldSpec* f) { return static_cast<size_t>(f - spec.fields.data()); };

  for (const json::Member& m : in.members()) {
    const std::string key_path = join_path(path, m.key);
    const FieldSpec* f = spec.find(m.key);
    if (!f) {
      if (spec.allow_unknown) {
        unknown.push_back(&m);
        if (!spec.quiet_unknown) notice(key_path, "accepted but not used by dscore");
      } else {
        std::vector<std::string> candidates;
        for (const FieldSpec& c : spec.fields) {
          candidates.push_back(c.name);
          for (const std::string& a : c.aliases) candidates.push_back(a);
        }
        error(key_path, m.key_location,
              "unknown key \"" + m.key + "\"" + did_you_mean_suffix(m.key, candidates));
      }
      continue;
    }
    Slot& slot = slots[index_of(f)];
    if (slot.member) {
      error(key_path, m.key_location,
            "\"" + slot.member->key + "\" and \"" + m.key +
                "\" are two spellings of the same key; give only one");
      continue;
    }
    slot = Slot{&m, f};
  }

  // Deprecated keys: together with their replacement is DeepSpeed's error;
  // a rename moves the value into the replacement's slot.
  for (size_t i = 0; i < spec.fields.size(); ++i) {
    const FieldSpec& f = spec.fields[i];
    if (!slots[i].member || f.replaced_by.empty()) continue;
    const FieldSpec* replacement = spec.find(f.replaced_by);
    if (!replacement) continue;
    Slot& target = slots[index_of(replacement)];
    if (target.member && target.via == replacement) {
      error(join_path(path, slots[i].member->key), slots[i].member->key_location,
            "Cannot provide deprecated parameter '" + f.name + "' and replacing parameter '" +
                replacement->name + "' together");
      slots[i] = Slot{};
    } else if (f.rename) {
      target = slots[i];
      slots[i] = Slot{};
    }
  }

  for (size_t i = 0; i < spec.fields.size(); ++i) {
    const FieldSpec& f = spec.fields[i];
    const Slot& slot = slots[i];
    const std::string field_path = join_path(path, f.name);
    if (!slot.member) {
      if (f.required) {
        error(field_path, value.location, "missing required key \"" + f.name + "\"");
      } else if (f.default_value) {
        if (f.type == FieldType::kObject && f.object) {
          out.members().push_back({f.name, {}, object(*f.default_value, *f.object, field_path)});
        } else {
          out.members().push_back({f.name, {}, *f.default_value});
        }
      }
      continue;
    }
    const json::Member& m = *slot.member;
    const std::string given_path = join_path(path, m.key);
    if (!slot.via->error.empty()) {
      error(given_path, m.key_location, slot.via->error, slot.via->error_kind);
      continue;
    }
    if (!slot.via->deprecated.empty()) notice(given_path, slot.via->deprecated);
    // A renamed key validates against its replacement's spec.
    std::optional<json::Value> v = field(m.value, f, given_path);
    if (v && !slot.via->unsupported_what.empty() && feature_on(*slot.via, *v))
      error(given_path, m.key_location, unsupported_message(*slot.via), ErrorKind::kUnsupported);
    else if (slot.via->not_used)
      notice(given_path, "accepted but not used by dscore");
    if (v) out.members().push_back({f.name, m.key_location, std::move(*v)});
  }

  for (const json::Member* m : unknown) out.members().push_back(*m);
  return out;
}

std::optional<json::Value> Validator::field(const json::Value& v, const FieldSpec& f,
                                            const std::string& path) {
  if (v.is_null()) {
    if (f.nullable) return std::nullopt;
    type_error(v, f, path);
    return std::nullopt;
  }
  // "auto" is a literal where it is the default (comm.backend) or where any
  // JSON goes; elsewhere it asks for the field's rule.
  const bool literal =
      f.type == FieldType::kJson || (f.default_value && f.default_value->is_auto());
  if (v.is_auto() && !literal) return resolve(v, f, path);
  return check(v, f, path);
}

std::optional<json::Value> Validator::resolve(const json::Value& v, const FieldSpec& f,
                                              const std::string& path) {
  if (f.auto_rule.empty()) {
    std::string tail = f.auto_note.empty() ? "give " + expected_phrase(f) : f.auto_note;
    error(path, v.location, "\"auto\" is not accepted here; " + tail);
    return std::nullopt;
  }
  if (!resolve_auto_) {
    error(path, v.location,
          "\"auto\" cannot be resolved here (no resolver); give " + expected_phrase(f));
    return std::nullopt;
  }
  AutoResolution r = resolve_auto_(f.auto_rule, f, path);
  if (!r.error.empty()) {
    error(path, v.location, "\"auto\" cannot be resolved: " + r.error);
    return std::nullopt;
  }
  if (!r.value) {
    if (!r.explanation.empty()) notice(path, "\"auto\" -> unset (" + r.explanation + ")");
    return std::nullopt;
  }
  json::Value resolved = *r.value;
  resolved.location = v.location;
  std::optional<json::Value> out =
      resolved.is_null() ? std::optional<json::Value>() : check(resolved, f, path);
  if (out) notice(path, "\"auto\" -> " + json::serialize(*out) + " (" + r.explanation + ")");
  return out;
}

bool Validator::number_ok(const json::Value& v, const FieldSpec& f, const std::string& path) {
  double x = v.as_number();
  if ((f.min && x < *f.min) || (f.max && x > *f.max)) {
    error(path, v.location, bounds_message(f, x));
    return false;
  }
  return true;
}

std::optional<json::Value> Validator::number_array(const json::Value& v, const FieldSpec& f,
                                                   const std::string& path) {
  bool ok = true;
  const auto& items = v.items();
  if (f.length && items.size() != *f.length) {
    error(
        path, v.location,
        "expected " + std::to_string(*f.length) + " numbers, got " + std::to_string(items.size()));
    ok = false;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string item_path = join_path(path, index_key(i));
    if (!items[i].is_number()) {
      error(item_path, items[i].location, "expected a number, got " + describe_value(items[i]));
      ok = false;
    } else if (!number_ok(items[i], f, item_path)) {
      ok = false;
    }
  }
  return ok ? std::optional<json::Value>(v) : std::nullopt;
}

std::optional<json::Value> Validator::enum_value(const json::Value& v, const FieldSpec& f,
                                                 const std::string& path) {
  if (f.enum_values.empty()) return v;
  for (const std::string& option : f.enum_values) {
    if (option == v.as_string() || (f.enum_case_insensitive && iequals(option, v.as_string()))) {
      json::Value out(option);
      out.location = v.location;
      return out;
    }
  }
  if (!f.enum_message.empty()) {
    std::string message = f.enum_message;
    size_t at = message.find("{}");
    if (at != std::string::npos) message.replace(at, 2, v.as_string());
    error(path, v.location, message);
  } else {
    error(path, v.location,
          "expected one of " + quoted_list(f.enum_values) + ", got " + value_text(v) +
              did_you_mean_suffix(v.as_string(), f.enum_values));
  }
  return std::nullopt;
}

std::optional<json::Value> Validator::check(const json::Value& v, const FieldSpec& f,
                                            const std::string& path) {
  switch (f.type) {
    case FieldType::kBool:
      if (!v.is_bool()) break;
      return v;
    case FieldType::kInt: {
      if (!v.is_integral()) break;
      json::Value out(v.as_int());
      out.location = v.location;
      if (!number_ok(out, f, path)) return std::nullopt;
      return out;
    }
    case FieldType::kNumber:
      if (!v.is_number()) break;
      if (!number_ok(v, f, path)) return std::nullopt;
      return v;
    case FieldType::kString:
      if (!v.is_string()) break;
      return enum_value(v, f, path);
    case FieldType::kNumberArray:
      if (!v.is_array()) break;
      return number_array(v, f, path);
    case FieldType::kNumberOrArray:
      if (v.is_number())
        return number_ok(v, f, path) ? std::optional<json::Value>(v) : std::nullopt;
      if (!v.is_array()) break;
      return number_array(v, f, path);
    case FieldType::kStringArray: {
      if (!v.is_array()) break;
      bool ok = true;
      json::Value out = json::Value::array();
      out.location = v.location;
      const auto& items = v.items();
      if (f.length && items.size() != *f.length) {
        error(path, v.location,
              "expected " + std::to_string(*f.length) + " strings, got " +
                  std::to_string(items.size()));
        ok = false;
      }
      for (size_t i = 0; i < items.size(); ++i) {
        const std::string item_path = join_path(path, index_key(i));
        if (!items[i].is_string()) {
          error(item_path, items[i].location, "expected a string, got " + describe_value(items[i]));
          ok = false;
        } else if (auto item = enum_value(items[i], f, item_path)) {
          out.push_back(std::move(*item));
        } else {
          ok = false;
        }
      }
      return ok ? std::optional<json::Value>(std::move(out)) : std::nullopt;
    }
    case FieldType::kObject:
      if (!v.is_object()) break;
      if (!f.object) return v;
      return object(v, *f.object, path);
    case FieldType::kObjectArray: {
      if (!v.is_array()) break;
      json::Value out = json::Value::array();
      out.location = v.location;
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        const std::string item_path = join_path(path, index_key(i));
        if (!items[i].is_object()) {
          error(item_path, items[i].location,
                "expected an object, got " + describe_value(items[i]));
        } else {
          out.push_back(f.object ? object(items[i], *f.object, item_path) : items[i]);
        }
      }
      return out;
    }
    case FieldType::kJson:
      return v;
  }
  type_error(v, f, path);
  return std::nullopt;
}

}  // namespace

json::Value validate_object(const json::Value& value, const ObjectSpec& spec,
                            const std::string& path, const AutoResolver& resolve_auto,
                            ValidationSink sink) {
  Validator validator(resolve_auto, sink);
  if (!value.is_null() && !value.is_object() && sink.errors) {
    sink.errors->push_back(
        ConfigError{path, value.location, "expected an object, got " + describe_value(value)});
  }
  return validator.object(value, spec, path);
}

}  // namespace dscore::config
