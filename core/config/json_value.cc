// json::Value: the document model (type, accessors, object/array editing,
// structural equality). Parsing and serializing live in json.cc.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/config/json.h"

namespace dscore::json {

const char* type_name(Type type) {
  switch (type) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "integer";
    case Type::kDouble:
      return "number";
    case Type::kString:
      return "string";
    case Type::kArray:
      return "array";
    case Type::kObject:
      return "object";
  }
  return "?";
}

// ------------------------------------------------------------------ Value

Value Value::array() {
  Value v;
  v.type_ = Type::kArray;
  return v;
}

Value Value::object() {
  Value v;
  v.type_ = Type::kObject;
  return v;
}

bool Value::is_integral() const {
  if (type_ == Type::kInt) return true;
  if (type_ != Type::kDouble || !std::isfinite(double_) || std::trunc(double_) != double_)
    return false;
  // [-2^63, 2^63): the doubles that convert to int64 exactly.
  return double_ >= -9223372036854775808.0 && double_ < 9223372036854775808.0;
}

static std::logic_error type_mismatch(const char* wanted, Type got) {
  return std::logic_error(std::string("json::Value: expected ") + wanted + ", have " +
                          type_name(got));
}

bool Value::as_bool() const {
  if (type_ != Type::kBool) throw type_mismatch("bool", type_);
  return bool_;
}

int64_t Value::as_int() const {
  if (type_ == Type::kInt) return int_;
  if (is_integral()) return static_cast<int64_t>(double_);
  throw type_mismatch("integer", type_);
}

double Value::as_number() const {
  if (type_ == Type::kInt) return static_cast<double>(int_);
  if (type_ == Type::kDouble) return double_;
  throw type_mismatch("number", type_);
}

const std::string& Value::as_string() const {
  if (type_ != Type::kString) throw type_mismatch("string", type_);
  return string_;
}

const std::vector<Value>& Value::items() const {
  if (type_ != Type::kArray) throw type_mismatch("array", type_);
  return items_;
}

std::vector<Value>& Value::items() {
  if (type_ != Type::kArray) throw type_mismatch("array", type_);
  return items_;
}

void Value::push_back(Value v) { items().push_back(std::move(v)); }

const std::vector<Member>& Value::members() const {
  if (type_ != Type::kObject) throw type_mismatch("object", type_);
  return members_;
}

std::vector<Member>& Value::members() {
  if (type_ != Type::kObject) throw type_mismatch("object", type_);
  return members_;
}

const Member* Value::find_member(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const Member& m : members_)
    if (m.key == key) return &m;
  return nullptr;
}

const Value* Value::find(std::string_view key) const {
  const Member* m = find_member(key);
  return m ? &m->value : nullptr;
}

Value* Value::find(std::string_view key) {
  return const_cast<Value*>(static_cast<const Value*>(this)->find(key));
}

Value& Value::set(std::string key, Value v) {
  for (Member& m : members()) {
    if (m.key == key) {
      m.value = std::move(v);
      return m.value;
    }
  }
  members_.push_back(Member{std::move(key), Location{}, std::move(v)});
  return members_.back().value;
}

bool Value::erase(std::string_view key) {
  auto& ms = members();
  auto it = std::find_if(ms.begin(), ms.end(), [&](const Member& m) { return m.key == key; });
  if (it == ms.end()) return false;
  ms.erase(it);
  return true;
}

bool operator==(const Value& a, const Value& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::kNull:
      return true;
    case Type::kBool:
      return a.as_bool() == b.as_bool();
    case Type::kInt:
      return a.as_int() == b.as_int();
    case Type::kDouble:
      return a.as_number() == b.as_number();
    case Type::kString:
      return a.as_string() == b.as_string();
    case Type::kArray:
      return a.items() == b.items();
    case Type::kObject: {
      const auto& am = a.members();
      const auto& bm = b.members();
      if (am.size() != bm.size()) return false;
      for (size_t i = 0; i < am.size(); ++i)
        if (am[i].key != bm[i].key || am[i].value != bm[i].value) return false;
      return true;
    }
  }
  return false;
}

}  // namespace dscore::json
