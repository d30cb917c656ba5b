// Parsing and serializing json::Value. Parsing runs RapidJSON's SAX reader
// (iterative, so hostile nesting cannot overflow the stack) and builds Values
// itself, recording the 1-based line:column of every value and key from byte
// offsets. RapidJSON stays inside this file (json_value.cc has the model).
#include "core/config/json.h"

#include <rapidjson/error/en.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/base/strings.h"

namespace dscore::json {

// ---------------------------------------------------------------- parsing

namespace {

// Byte offset -> 1-based line:column (columns count UTF-8 code points, as
// editors do).
class LineIndex {
 public:
  explicit LineIndex(std::string_view text) : text_(text) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n') line_starts_.push_back(i + 1);
  }
  Location at(size_t offset) const {
    offset = std::min(offset, text_.size());
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    size_t start = line_starts_[line - 1];
    int column = 1;
    // The parser asks in increasing order: count on from the last answer
    // when it is on the same line, so a one-line file stays linear.
    if (line == last_line_ && offset >= last_offset_) {
      start = last_offset_;
      column = last_column_;
    }
    for (size_t i = start; i < offset; ++i)
      if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) ++column;
    last_line_ = line;
    last_offset_ = offset;
    last_column_ = column;
    return Location{static_cast<int>(line), column};
  }

 private:
  std::string_view text_;
  std::vector<size_t> line_starts_;
  mutable size_t last_line_ = 0, last_offset_ = 0;  // the last answer (line 0: none)
  mutable int last_column_ = 1;
};

// The input stream RapidJSON reads. Unlike rapidjson::StringStream it has no
// copy optimisation, so Tell() is current inside handler callbacks (the
// reader otherwise parses strings and numbers on a local copy). Reading past
// the end yields NUL, which RapidJSON takes as the end of the text.
class TextStream {
 public:
  using Ch = char;
  explicit TextStream(std::string_view text)
      : begin_(text.data()), pos_(text.data()), end_(text.data() + text.size()) {}
  Ch Peek() const { return pos_ < end_ ? *pos_ : '\0'; }
  Ch Take() { return pos_ < end_ ? *pos_++ : '\0'; }
  size_t Tell() const { return static_cast<size_t>(pos_ - begin_); }
  // Write interface required by the concept; never used (no in-situ parsing).
  Ch* PutBegin() { return nullptr; }
  void Put(Ch) {}
  void Flush() {}
  size_t PutEnd(Ch*) { return 0; }

 private:
  const char* begin_;
  const char* pos_;
  const char* end_;
};

// For a valid JSON number that std::from_chars found out of range: true when
// it is too large (rather than too small) for a double, from the position
// of its first significant digit and its exponent.
bool too_big(std::string_view number) {
  size_t i = number[0] == '-' ? 1 : 0;
  bool seen_point = false, seen_digit = false;
  int64_t integer_digits = 0, leading_fraction_zeros = 0;
  for (; i < number.size() && number[i] != 'e' && number[i] != 'E'; ++i) {
    char c = number[i];
    if (c == '.') {
      seen_point = true;
    } else if (!seen_point) {
      if (seen_digit || c != '0') {
        seen_digit = true;
        ++integer_digits;
      }
    } else if (!seen_digit) {
      if (c == '0')
        ++leading_fraction_zeros;
      else
        seen_digit = true;
    }
  }
  // Decimal exponent of the first significant digit.
  const int64_t magnitude = integer_digits > 0 ? integer_digits - 1 : -(leading_fraction_zeros + 1);
  int64_t exponent = 0;
  if (i < number.size()) {
    ++i;
    bool negative = i < number.size() && number[i] == '-';
    if (i < number.size() && (number[i] == '-' || number[i] == '+')) ++i;
    for (; i < number.size(); ++i)
      exponent = std::min<int64_t>(exponent * 10 + (number[i] - '0'), int64_t{1} << 40);
    if (negative) exponent = -exponent;
  }
  return magnitude + exponent > 0;
}

// SAX handler building Values. RapidJSON calls the scalar and key handlers
// after consuming the token (container handlers before their bracket), so a
// token's start is found by scanning forward from the end of the previous
// one over whitespace, comments, separators and closing brackets.
class Builder : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, Builder> {
 public:
  Builder(std::string_view text, const TextStream& stream)
      : text_(text), stream_(stream), lines_(text) {}

  bool Null() { return add(Value()); }
  bool Bool(bool b) { return add(Value(b)); }
  // Numbers arrive as text (kParseNumbersAsStringsFlag) and are converted
  // with std::from_chars: exactly rounded, and clear of RapidJSON 1.1.0's
  // undefined behaviour on inputs such as 0e97.
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) {
    const char* end = s + n;
    int64_t i = 0;
    auto [int_end, int_err] = std::from_chars(s, end, i);
    if (int_err == std::errc() && int_end == end) return add(Value(i));
    double d = 0;
    auto [dbl_end, dbl_err] = std::from_chars(s, end, d);
    if (dbl_err == std::errc() && dbl_end == end) return add(Value(d));
    if (!too_big(std::string_view(s, n)))
      return add(Value(s[0] == '-' ? -0.0 : 0.0));  // 1e-400 is 0
    error_location_ = token_start();
    error_ = "Number too big to be stored in double.";
    return false;
  }
  bool String(const char* s, rapidjson::SizeType n, bool) { return add(Value(std::string(s, n))); }

  bool StartObject() { return start(Value::object()); }
  bool StartArray() { return start(Value::array()); }
  bool EndObject(rapidjson::SizeType) { return end(); }
  bool EndArray(rapidjson::SizeType) { return end(); }

  bool Key(const char* s, rapidjson::SizeType n, bool) {
    Location where = token_start();
    std::string key(s, n);
    // Small objects are scanned; large ones (a tokenizer's vocabulary of
    // 128k tokens) get a key index, so parsing stays linear.
    const std::vector<Member>& members = stack_.back().members();
    std::unordered_map<std::string, size_t>& index = key_index_.back();
    const Member* first = nullptr;
    if (members.size() < kIndexedKeys) {
      for (const Member& m : members)
        if (m.key == key) first = &m;
    } else {
      if (index.empty())
        for (size_t i = 0; i < members.size(); ++i) index.emplace(members[i].key, i);
      auto [it, inserted] = index.emplace(key, members.size());
      if (!inserted) first = &members[it->second];
    }
    if (first != nullptr) {
      error_location_ = where;
      error_ = "duplicate key \"" + key + "\" (first at " +
               std::to_string(first->key_location.line) + ":" +
               std::to_string(first->key_location.column) + ")";
      return false;
    }
    pending_key_ = std::move(key);
    pending_key_location_ = where;
    mark_end();
    return true;
  }

  Value take_root() { return std::move(root_); }
  bool has_error() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  Location error_location() const { return error_location_; }
  Location location_of(size_t offset) const { return lines_.at(offset); }

 private:
  Location token_start() { return lines_.at(token_offset()); }
  size_t token_offset() const {
    size_t i = last_end_;
    while (i < text_.size()) {
      char c = text_[i];
      // Closers too: the iterative reader reports the end of a container
      // before consuming its '}' or ']'.
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == ':' || c == '}' ||
          c == ']') {
        ++i;
      } else if (c == '/' && i + 1 < text_.size() && text_[i + 1] == '/') {
        while (i < text_.size() && text_[i] != '\n') ++i;
      } else if (c == '/' && i + 1 < text_.size() && text_[i + 1] == '*') {
        size_t close = text_.find("*/", i + 2);
        i = close == std::string_view::npos ? text_.size() : close + 2;
      } else {
        break;
      }
    }
    return i;
  }
  void mark_end() { last_end_ = stream_.Tell(); }

  bool add(Value v) {
    v.location = token_start();
    mark_end();
    return attach(std::move(v));
  }

  bool attach(Value v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Value& top = stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
    } else {
      top.members().push_back(Member{std::move(pending_key_), pending_key_location_, std::move(v)});
      pending_key_.clear();
    }
    return true;
  }

  bool start(Value container) {
    // Called before the reader consumes the '{' or '[' (one byte).
    const size_t offset = token_offset();
    container.location = lines_.at(offset);
    if (static_cast<int>(stack_.size()) >= kMaxNestingDepth) {
      error_location_ = container.location;
      error_ =
          "objects and arrays nest deeper than " + std::to_string(kMaxNestingDepth) + " levels";
      return false;
    }
    last_end_ = offset + 1;
    // The key this container belongs to must survive the nested keys.
    keys_.push_back({std::move(pending_key_), pending_key_location_});
    pending_key_.clear();
    stack_.push_back(std::move(container));
    key_index_.emplace_back();
    return true;
  }

  bool end() {
    mark_end();
    Value done = std::move(stack_.back());
    stack_.pop_back();
    key_index_.pop_back();
    pending_key_ = std::move(keys_.back().first);
    pending_key_location_ = keys_.back().second;
    keys_.pop_back();
    return attach(std::move(done));
  }

  std::string_view text_;
  const TextStream& stream_;
  LineIndex lines_;
  size_t last_end_ = 0;
  std::vector<Value> stack_;
  static constexpr size_t kIndexedKeys = 64;
  std::vector<std::unordered_map<std::string, size_t>> key_index_;  // per stack_ entry
  std::vector<std::pair<std::string, Location>> keys_;
  std::string pending_key_;
  Location pending_key_location_;
  Value root_;
  std::string error_;
  Location error_location_;
};

// Comments and trailing commas as DeepSpeed's hjson loader tolerates them;
// NaN/Infinity stay rejected (not JSON, and not meaningful in a config).
constexpr unsigned kParseFlags = rapidjson::kParseIterativeFlag | rapidjson::kParseCommentsFlag |
                                 rapidjson::kParseTrailingCommasFlag |
                                 rapidjson::kParseValidateEncodingFlag |
                                 rapidjson::kParseNumbersAsStringsFlag;

}  // namespace

bool parse_with_location(std::string_view text, Value* out, ParseError* error) {
  // The reader stops at a NUL byte, so a NUL is reported here unless the
  // text is already broken before it.
  TextStream stream(text);
  Builder builder(text, stream);
  rapidjson::Reader reader;
  rapidjson::ParseResult result = reader.Parse<kParseFlags>(stream, builder);
  const size_t nul = text.find('\0');
  if (nul != std::string_view::npos && (result || result.Offset() >= nul)) {
    error->location = builder.location_of(nul);
    error->message = "NUL byte in the text (is this a binary file?)";
    return false;
  }
  if (result) {
    *out = builder.take_root();
    return true;
  }
  if (builder.has_error()) {
    error->location = builder.error_location();
    error->message = builder.error();
  } else {
    error->location = builder.location_of(result.Offset());
    error->message = rapidjson::GetParseError_En(result.Code());
  }
  return false;
}

static std::string prefix(std::string_view source, Location where) {
  std::string out(source);
  if (where.known()) {
    // Appended piecewise (GCC 12 -Wrestrict false positive, see config.cc).
    out += ':';
    out += std::to_string(where.line);
    out += ':';
    out += std::to_string(where.column);
  }
  return out + ": ";
}

Result<Value> parse(std::string_view text, std::string_view source_name) {
  Value value;
  ParseError error;
  if (!parse_with_location(text, &value, &error))
    return invalid_argument(prefix(source_name, error.location) + error.message);
  return value;
}

Result<Value> parse_file(const std::string& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    return not_found("cannot read config file " + path + ": " +
                     (err ? std::strerror(err) : "cannot open"));
  }
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return io_error("cannot read config file " + path + ": read failed");
  return parse(content.str(), path);
}

// ------------------------------------------------------------ serializing

namespace {

// Shortest text that reads back to the same double, kept recognisably a
// double ("1.0", not "1") so a round trip preserves the type.
std::string double_text(double d) {
  std::string s = format_double(d);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

template <typename Writer>
void write(Writer& w, const Value& v) {
  switch (v.type()) {
    case Type::kNull:
      w.Null();
      break;
    case Type::kBool:
      w.Bool(v.as_bool());
      break;
    case Type::kInt:
      w.Int64(v.as_int());
      break;
    case Type::kDouble: {
      double d = v.as_number();
      if (!std::isfinite(d)) {
        w.Null();
      } else {
        std::string s = double_text(d);
        w.RawValue(s.c_str(), s.size(), rapidjson::kNumberType);
      }
      break;
    }
    case Type::kString: {
      const std::string& s = v.as_string();
      w.String(s.c_str(), static_cast<rapidjson::SizeType>(s.size()));
      break;
    }
    case Type::kArray:
      w.StartArray();
      for (const Value& item : v.items()) write(w, item);
      w.EndArray();
      break;
    case Type::kObject:
      w.StartObject();
      for (const Member& m : v.members()) {
        w.Key(m.key.c_str(), static_cast<rapidjson::SizeType>(m.key.size()));
        write(w, m.value);
      }
      w.EndObject();
      break;
  }
}

}  // namespace

std::string serialize(const Value& value, bool pretty) {
  rapidjson::StringBuffer buffer;
  if (pretty) {
    rapidjson::PrettyWriter<rapidjson::StringBuffer> writer(buffer);
    writer.SetIndent(' ', 2);
    write(writer, value);
  } else {
    rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
    write(writer, value);
  }
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace dscore::json
