// tokenizer_config.json / special_tokens_map.json reading (special_tokens.h).
#include "core/tokenizer/special_tokens.h"

#include <sys/stat.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dscore::tokenizer {

Result<std::string> read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return not_found(path + " does not exist");
    return io_error("cannot read " + path + ": " + std::strerror(err));
  }
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return io_error("cannot read " + path + ": read failed");
  return content.str();
}

Result<json::Value> read_json_file(const std::string& path) {
  DSCORE_ASSIGN_OR_RETURN(const std::string text, read_whole_file(path));
  return json::parse(text, path);
}

namespace {

Status read_token(const json::Value& root, const char* key, const std::string& path,
                  std::optional<std::string>* out) {
  if (out->has_value()) return Status::Ok();  // the earlier file said
  const json::Value* v = root.find(key);
  if (v == nullptr || v->is_null()) return Status::Ok();
  if (v->is_string()) {
    *out = v->as_string();
    return Status::Ok();
  }
  const json::Value* content = v->is_object() ? v->find("content") : nullptr;
  if (content != nullptr && content->is_string()) {
    *out = content->as_string();
    return Status::Ok();
  }
  return invalid_argument(path + ": \"" + key +
                          "\" must be a token text, an object with a \"content\" text, or null");
}

Status read_flag(const json::Value& root, const char* key, const std::string& path,
                 std::optional<bool>* out) {
  if (out->has_value()) return Status::Ok();
  const json::Value* v = root.find(key);
  if (v == nullptr || v->is_null()) return Status::Ok();
  if (!v->is_bool()) return invalid_argument(path + ": \"" + key + "\" must be true or false");
  *out = v->as_bool();
  return Status::Ok();
}

}  // namespace

Result<SpecialTokenNames> read_special_token_names(const std::string& dir) {
  SpecialTokenNames names;
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string path = dir + "/" + file;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;
    DSCORE_ASSIGN_OR_RETURN(const json::Value root, read_json_file(path));
    if (!root.is_object()) return invalid_argument(path + " must hold a JSON object");
    DSCORE_RETURN_IF_ERROR(read_token(root, "bos_token", path, &names.bos));
    DSCORE_RETURN_IF_ERROR(read_token(root, "eos_token", path, &names.eos));
    DSCORE_RETURN_IF_ERROR(read_flag(root, "add_bos_token", path, &names.add_bos));
    DSCORE_RETURN_IF_ERROR(read_flag(root, "add_eos_token", path, &names.add_eos));
  }
  return names;
}

}  // namespace dscore::tokenizer
