// Where a schema field lands in TrainingConfig (private to core/config). A
// ds_config.json key is declared once, in the schema (deepspeed_schema*.cc),
// with its type, its default and the member it fills: F("stage", ...).def(0)
// .to(&ZeroConfig::stage). build_training_config() walks the validated
// document along the schema and fills the bound members, so defaults live in
// the schema alone and no key is spelled a second time.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <typeindex>
#include <vector>

#include "core/config/json.h"
#include "core/config/training_config.h"

namespace dscore::config {

// One field's binding. Exactly one of `assign` (a value) and `open` (a
// section whose own fields fill a struct) is set. `owner` is the struct that
// holds the member; the walker checks it against the struct the enclosing
// section fills, so a field bound to the wrong struct fails the first time
// any config is built (a bug, caught by every config test), never silently.
struct FieldBinding {
  std::type_index owner = typeid(void);
  // Writes the validated, non-null value at JSON path `path` into *owner.
  std::function<void(const json::Value& value, const std::string& path, void* owner)> assign;
  // The struct the section's fields fill, inside *owner. `present`: the
  // section is in the validated document (written, or filled from its
  // default). Returns nullptr for an optional member when the section is
  // absent: it stays unset.
  std::function<void*(void* owner, bool present)> open;
  std::type_index section = typeid(void);  // the struct `open` returns
};

// ---- JSON -> member, for the member types TrainingConfig uses. The value
// has been validated against the field's type already; a mismatch throws.
inline void assign_json(const json::Value& v, bool* out) { *out = v.as_bool(); }
inline void assign_json(const json::Value& v, int* out) { *out = static_cast<int>(v.as_int()); }
inline void assign_json(const json::Value& v, int64_t* out) { *out = v.as_int(); }
inline void assign_json(const json::Value& v, uint64_t* out) {
  *out = static_cast<uint64_t>(v.as_int());
}
inline void assign_json(const json::Value& v, double* out) { *out = v.as_number(); }
inline void assign_json(const json::Value& v, std::string* out) { *out = v.as_string(); }
inline void assign_json(const json::Value& v, json::Value* out) { *out = v; }
// The schema admits only these three (an enum field).
inline void assign_json(const json::Value& v, OffloadDevice* out) {
  const std::string& name = v.as_string();
  *out = name == "cpu"    ? OffloadDevice::kCpu
         : name == "nvme" ? OffloadDevice::kNvme
                          : OffloadDevice::kNone;
}
inline void assign_json(const json::Value& v, std::vector<std::string>* out) {
  out->clear();
  for (const json::Value& item : v.items()) out->push_back(item.as_string());
}
template <typename T>
requires requires(const json::Value& v, T* t) { assign_json(v, t); }
void assign_json(const json::Value& v, std::optional<T>* out) { assign_json(v, &out->emplace()); }

template <typename M>
concept JsonValued = requires(const json::Value& v, M* m) {
  assign_json(v, m);
};

template <typename M>
struct OptionalOf {
  using type = M;
  static constexpr bool kOptional = false;
};
template <typename M>
struct OptionalOf<std::optional<M>> {
  using type = M;
  static constexpr bool kOptional = true;
};

// A member: a value member is assigned; a struct member (or an optional
// struct) is a section whose fields bind into it. A section struct with a
// `present` member learns whether the section was written.
template <typename S, typename M>
FieldBinding bind_member(M S::*member) {
  FieldBinding b;
  b.owner = typeid(S);
  if constexpr (JsonValued<M>) {
    b.assign = [member](const json::Value& v, const std::string&, void* owner) {
      assign_json(v, &(static_cast<S*>(owner)->*member));
    };
  } else {
    using Section = typename OptionalOf<M>::type;
    b.section = typeid(Section);
    b.open = [member](void* owner, bool present) -> void* {
      M& m = static_cast<S*>(owner)->*member;
      Section* section = nullptr;
      if constexpr (OptionalOf<M>::kOptional) {
        if (!present) return nullptr;
        section = &m.emplace();
      } else {
        section = &m;
      }
      if constexpr (requires { section->present = present; }) section->present = present;
      return section;
    };
  }
  return b;
}

// A member reached through an accessor: `[](TrainingConfig& c) -> auto& {
// return c.batch.train_batch_size; }` (a top-level key kept in a sub-struct).
template <typename S, typename Get>
requires std::invocable<Get, S&> FieldBinding bind_accessor(Get get) {
  FieldBinding b;
  b.owner = typeid(S);
  b.assign = [get](const json::Value& v, const std::string&, void* owner) {
    assign_json(v, &get(*static_cast<S*>(owner)));
  };
  return b;
}

// A conversion that is more than a copy (a plugin section, the monitors).
template <typename S>
FieldBinding bind_reader(
    std::function<void(const json::Value&, const std::string& path, S&)> read) {
  FieldBinding b;
  b.owner = typeid(S);
  b.assign = [read = std::move(read)](const json::Value& v, const std::string& path, void* owner) {
    read(v, path, *static_cast<S*>(owner));
  };
  return b;
}

// A section with no struct of its own: its fields fill S itself
// ("data_types.grad_accum_dtype" -> TrainingConfig::grad_accum_dtype).
template <typename S>
FieldBinding bind_flattened() {
  FieldBinding b;
  b.owner = typeid(S);
  b.section = typeid(S);
  b.open = [](void* owner, bool) { return owner; };
  return b;
}

// ---- The conversions the schema's readers use (training_config_builder.cc).

// {"type": ..., "params": {...}} at `path`: params as written ({} placed at
// the section when absent), params_path "<path>.params".
PluginRef plugin_ref(const json::Value& section, const std::string& path);
// "model": {"type": ..., every other key is a param}.
PluginRef model_ref(const json::Value& section, const std::string& path);
// A DeepSpeed monitor section ("csv_monitor": {"enabled": true, ...}):
// appended as the plugin named like the section when enabled; its params are
// the section's keys other than "enabled".
void add_monitor_section(const json::Value& section, const std::string& path,
                         std::vector<PluginRef>* monitors);
// "plugins.monitors": [{"type": ..., "params": {...}}, ...].
void add_monitor_plugins(const json::Value& list, const std::string& path,
                         std::vector<PluginRef>* monitors);

}  // namespace dscore::config
