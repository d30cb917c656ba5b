// A small JSON document model that remembers where each value came from
// (line:column), so config errors can point at the text the user wrote.
// Parsing (RapidJSON underneath, which stays private to core/config) accepts
// comments and trailing commas like DeepSpeed's hjson loader, and rejects
// duplicate keys. Objects keep their members in source order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace dscore::json {

// 1-based position in the source text; line 0 = unknown (built in code).
struct Location {
  int line = 0;
  int column = 0;
  bool known() const { return line > 0; }
};

enum class Type { kNull, kBool, kInt, kDouble, kString, kArray, kObject };

const char* type_name(
    Type type);  // "null", "bool", "integer", "number", "string", "array", "object"

struct Member;

class Value {
 public:
  // Defined after Member (below): a constructor needs Member complete.
  Value();  // null
  Value(std::nullptr_t);
  Value(bool b);
  Value(int v);
  Value(int64_t v);
  Value(double v);
  Value(const char* s);
  Value(std::string s);
  Value(std::string_view s);
  static Value array();
  static Value object();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kDouble; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  // An int, or a double with an integral value that fits int64 (5e8).
  bool is_integral() const;
  // The string "auto".
  bool is_auto() const { return type_ == Type::kString && string_ == "auto"; }

  // Accessors throw std::logic_error on a type mismatch (check first).
  bool as_bool() const;
  int64_t as_int() const;    // int, or an integral double
  double as_number() const;  // int or double
  const std::string& as_string() const;

  const std::vector<Value>& items() const;
  std::vector<Value>& items();
  void push_back(Value v);

  const std::vector<Member>& members() const;
  std::vector<Member>& members();
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  const Member* find_member(std::string_view key) const;
  // Replace the value of `key` or append it.
  Value& set(std::string key, Value v);
  bool erase(std::string_view key);

  Location location;  // where the value starts

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  std::vector<Value> items_;
  std::vector<Member> members_;
};

struct Member {
  std::string key;
  Location key_location;  // where the key's opening quote is
  Value value;
};

inline Value::Value() = default;
inline Value::Value(std::nullptr_t) {}
inline Value::Value(bool b) : type_(Type::kBool), bool_(b) {}
inline Value::Value(int v) : type_(Type::kInt), int_(v) {}
inline Value::Value(int64_t v) : type_(Type::kInt), int_(v) {}
inline Value::Value(double v) : type_(Type::kDouble), double_(v) {}
inline Value::Value(const char* s) : type_(Type::kString), string_(s) {}
inline Value::Value(std::string s) : type_(Type::kString), string_(std::move(s)) {}
inline Value::Value(std::string_view s) : type_(Type::kString), string_(s) {}

bool operator==(const Value& a, const Value& b);  // structural; ignores locations
inline bool operator!=(const Value& a, const Value& b) { return !(a == b); }

// Parse `text`. On error the status message reads
// "<source_name>:<line>:<column>: <what is wrong>", e.g.
// "ds_config.json:4:3: duplicate key \"train_batch_size\" (first at 2:3)".
Result<Value> parse(std::string_view text, std::string_view source_name);
// Read and parse a file; the source name in messages is the path.
Result<Value> parse_file(const std::string& path);

// Like parse(), for callers that report the position themselves (config
// loading): on failure returns false and fills `error` with the location and
// the bare message ("duplicate key \"a\" (first at 2:3)"), no source prefix.
struct ParseError {
  Location location;
  std::string message;
};
bool parse_with_location(std::string_view text, Value* out, ParseError* error);

// Objects and arrays nest at most this deep; deeper input is a parse error
// (keeps every recursive walk over a Value within a small stack).
inline constexpr int kMaxNestingDepth = 128;

// Serialize. pretty: 2-space indent, one member per line. Doubles print in
// the shortest form that reads back identically; non-finite doubles as null.
std::string serialize(const Value& value, bool pretty = false);

}  // namespace dscore::json
