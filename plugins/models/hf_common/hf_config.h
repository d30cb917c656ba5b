// A Hugging Face config.json as model plugins read and write it: typed
// lookups that say which key of which file is wrong, and the export's text
// (the original file's keys kept, the model's own values set over them).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dscore::hf {

class HfConfig {
 public:
  // Parses `text` (the contents of `path`, named in messages); a JSON
  // error or a top level that is not an object is an error.
  HfConfig(const std::string& text, const std::string& path);
  ~HfConfig();
  HfConfig(const HfConfig&) = delete;
  HfConfig& operator=(const HfConfig&) = delete;

  const std::string& path() const { return path_; }
  const std::string& text() const { return text_; }
  bool has(const std::string& key) const;  // present and not null
  // The value of `key`, or `fallback` when absent or null; a value of
  // another type is an error naming the key and the file.
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const;
  double number(const std::string& key, std::optional<double> fallback = std::nullopt) const;
  bool boolean(const std::string& key, std::optional<bool> fallback = std::nullopt) const;
  std::string string(const std::string& key,
                     std::optional<std::string> fallback = std::nullopt) const;
  // The value of `key` as compact JSON text (an object such as
  // rope_scaling), or "" when absent or null.
  std::string json(const std::string& key) const;

 private:
  struct Doc;
  std::string path_;
  std::string text_;
  std::unique_ptr<Doc> doc_;
};

// A config.json for an export: `base` (an original config.json's text, or
// "" for none) with each (key, JSON value text) of `values` set over it, in
// that order for new keys; pretty-printed, as save_pretrained writes it.
std::string write_config_json(const std::string& base,
                              const std::vector<std::pair<std::string, std::string>>& values);

// `s` as a JSON string literal.
std::string json_string(const std::string& s);

}  // namespace dscore::hf
