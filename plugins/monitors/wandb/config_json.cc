// A minimal JSON scanner for config_json.h: checks structure, unescapes
// object keys (\uXXXX with surrogate pairs to UTF-8) and returns each value's
// text span. It trusts the host to have produced valid JSON inside values
// (numbers and literals are taken as the run of characters up to a
// delimiter).
#include "config_json.h"

#include <dscore/cpp/plugin.hpp>

#include <string>

namespace dscore::wandb {
namespace {

class Scanner {
 public:
  explicit Scanner(std::string_view text) : s_(text) {}

  std::vector<Item> object_members() {
    std::vector<Item> out;
    skip_ws();
    expect('{');
    skip_ws();
    if (peek() == '}') {
      ++pos_;
    } else {
      for (;;) {
        skip_ws();
        Item item;
        item.key = string();
        skip_ws();
        expect(':');
        skip_ws();
        const size_t begin = pos_;
        skip_value();
        item.value_json = std::string(s_.substr(begin, pos_ - begin));
        out.push_back(std::move(item));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        break;
      }
    }
    skip_ws();
    if (pos_ != s_.size()) fail("text after the config object");
    return out;
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     "the resolved config given to write_config is not a "
                     "JSON object: " +
                         what + " at offset " + std::to_string(pos_));
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("bad \\u escape");
    }
    return v;
  }

  static void put_utf8(std::string* out, unsigned cp) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(pos_, 2) == "\\u") {
            pos_ += 2;
            const unsigned low = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          put_utf8(&out, cp);
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }

  void skip_value() {
    const char c = peek();
    if (c == '"') {
      string();
    } else if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      skip_ws();
      if (peek() == close) {
        ++pos_;
        return;
      }
      for (;;) {
        skip_ws();
        if (close == '}') {
          string();
          skip_ws();
          expect(':');
          skip_ws();
        }
        skip_value();
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(close);
        return;
      }
    } else {
      const size_t begin = pos_;
      while (pos_ < s_.size() &&
             std::string_view(",}] \t\r\n").find(s_[pos_]) == std::string_view::npos)
        ++pos_;
      if (pos_ == begin) fail("expected a value");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<Item> top_level_members(std::string_view json) {
  return Scanner(json).object_members();
}

}  // namespace dscore::wandb
