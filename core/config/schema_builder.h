// A compact way to write schemas in C++ (private to core/config): the
// DeepSpeed schema is a few hundred fields and reads best as one line each,
// and each line also names the TrainingConfig member the key fills.
//   F("stage", FieldType::kInt, "ZeRO stage").def(0).range(0, 3).to(&ZeroConfig::stage)
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config/config_binding.h"
#include "core/config/schema.h"

namespace dscore::config {

class F {
 public:
  F(std::string name, FieldType type, std::string doc) {
    s_.name = std::move(name);
    s_.type = type;
    s_.doc = std::move(doc);
  }
  F& def(json::Value v) {
    s_.default_value = std::move(v);
    return *this;
  }
  F& def_int(int64_t v) {
    s_.default_value = json::Value(v);
    return *this;
  }
  F& nullable() {
    s_.nullable = true;
    return *this;
  }
  F& required() {
    s_.required = true;
    return *this;
  }
  F& min(double v) {
    s_.min = v;
    return *this;
  }
  F& max(double v) {
    s_.max = v;
    return *this;
  }
  F& range(double lo, double hi) {
    s_.min = lo;
    s_.max = hi;
    return *this;
  }
  F& enums(std::vector<std::string> values, bool case_insensitive = false) {
    s_.enum_values = std::move(values);
    s_.enum_case_insensitive = case_insensitive;
    return *this;
  }
  F& length(size_t n) {
    s_.length = n;
    return *this;
  }
  F& enum_message(std::string m) {
    s_.enum_message = std::move(m);
    return *this;
  }
  F& auto_rule(std::string r) {
    s_.auto_rule = std::move(r);
    return *this;
  }
  F& auto_note(std::string n) {
    s_.auto_note = std::move(n);
    return *this;
  }
  F& alias(std::string a) {
    s_.aliases.push_back(std::move(a));
    return *this;
  }
  F& deprecated(std::string message) {
    s_.deprecated = std::move(message);
    return *this;
  }
  // Deprecated and replaced by `replacement` (giving both is an error);
  // `rename`: the value moves to the replacement as is.
  F& replaced_by(std::string replacement, bool rename) {
    s_.replaced_by = std::move(replacement);
    s_.rename = rename;
    return *this;
  }
  F& error(std::string message) {
    s_.error = std::move(message);
    return *this;
  }
  // A form DeepSpeed itself rejects but whose meaning is plain: an
  // ErrorKind::kDeepSpeedRejects error naming the fix.
  F& rejected_form(std::string message) {
    s_.error = std::move(message);
    s_.error_kind = ErrorKind::kDeepSpeedRejects;
    return *this;
  }
  // A block of a feature DeepSpeed has removed and now rejects when given
  // at all: an ErrorKind::kRemoved error. `what` names the feature, `instead`
  // what to do.
  F& removed(const std::string& what, const std::string& instead) {
    s_.error = what + " was removed from DeepSpeed, which now rejects \"" + s_.name +
               "\" (DeepSpeed 0.19.8, deepspeedai/DeepSpeed#8489); " + instead;
    s_.error_kind = ErrorKind::kRemoved;
    return *this;
  }
  // A DeepSpeed feature dscore does not implement (FieldSpec::unsupported_what).
  F& unsupported(std::string what, std::string fix, std::string switch_key = "") {
    s_.unsupported_what = std::move(what);
    s_.unsupported_fix = std::move(fix);
    s_.switch_key = std::move(switch_key);
    return *this;
  }
  F& object(std::shared_ptr<const ObjectSpec> spec) {
    s_.object = std::move(spec);
    return *this;
  }
  F& not_used() {
    s_.not_used = true;
    return *this;
  }
  // The TrainingConfig member the key fills (config_binding.h): a value, or
  // for an object field the struct its own fields fill.
  template <typename S, typename M>
  F& to(M S::*member) {
    return bind(bind_member(member));
  }
  // A member reached through an accessor: .to<TrainingConfig>([](TrainingConfig& c)
  // -> auto& { return c.batch.train_batch_size; }).
  template <typename S, typename Get>
  requires std::invocable<Get, S&> F& to(Get get) { return bind(bind_accessor<S>(std::move(get))); }
  // A conversion that is more than a copy: read(value, path, struct).
  template <typename S>
  F& read(std::function<void(const json::Value&, const std::string&, S&)> reader) {
    return bind(bind_reader<S>(std::move(reader)));
  }
  // An object field whose own fields fill S itself (no struct of its own).
  template <typename S>
  F& flattened_into() {
    return bind(bind_flattened<S>());
  }
  operator FieldSpec() const& { return s_; }  // NOLINT: a builder converts implicitly

 private:
  F& bind(FieldBinding binding) {
    s_.binding = std::make_shared<const FieldBinding>(std::move(binding));
    return *this;
  }
  FieldSpec s_;
};

struct ObjectOptions {
  bool allow_unknown = false;
  bool quiet_unknown = false;
  // A DeepSpeed pydantic section: "auto" is silently dropped there, so a
  // rejected "auto" says what DeepSpeed would have done instead.
  bool pydantic = false;
};

std::shared_ptr<const ObjectSpec> make_object(std::vector<FieldSpec> fields, std::string doc,
                                              ObjectOptions options = {});

// The sections, one group per source file (deepspeed_schema*.cc).
std::shared_ptr<const ObjectSpec> zero_optimization_spec();
std::shared_ptr<const ObjectSpec> offload_param_spec();
std::shared_ptr<const ObjectSpec> offload_optimizer_spec();
std::shared_ptr<const ObjectSpec> aio_spec();
// Monitors, comms_logger, checkpoint, timers and the sections dscore reads
// but does not act on, appended to the top-level field list.
void add_other_sections(std::vector<FieldSpec>* fields);
// "autotuning" (deepspeed_schema_autotuning.cc).
FieldSpec autotuning_section();

}  // namespace dscore::config
