// What a Hugging Face folder's tokenizer_config.json and
// special_tokens_map.json say about special tokens, for the loaders.
#pragma once

#include <optional>
#include <string>

#include "core/base/status.h"
#include "core/config/json.h"

namespace dscore::tokenizer {

struct SpecialTokenNames {
  std::optional<std::string> bos, eos;   // token texts ("<s>", "<|endoftext|>")
  std::optional<bool> add_bos, add_eos;  // tokenizer_config.json's add_bos_token, add_eos_token
};

// Reads DIR/tokenizer_config.json, then DIR/special_tokens_map.json for what
// the first did not give. Missing files give nothing; a file that is not
// JSON, or a "bos_token" that is neither a string, an object with a
// "content" string nor null, is an error naming the file and the key.
Result<SpecialTokenNames> read_special_token_names(const std::string& dir);

// A whole file as text; NOT_FOUND when it does not exist.
Result<std::string> read_whole_file(const std::string& path);
// read_whole_file + json::parse.
Result<json::Value> read_json_file(const std::string& path);

}  // namespace dscore::tokenizer
