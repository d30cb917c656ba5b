#include "core/serve/completions_api.h"

#include <cstddef>

#include "core/base/strings.h"
#include "core/config/json.h"

namespace dscore::serve {
namespace {

Status field_error(const char* key, const char* what) {
  return invalid_argument(std::string("\"") + key + "\" must be " + what);
}

// The length of the longest prefix of `text` that ends on a whole UTF-8
// character.
size_t complete_utf8(const std::string& text) {
  size_t n = text.size();
  // Back over at most 3 continuation bytes to a lead byte.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t need = c < 0x80         ? 1
                        : (c >> 5) == 6  ? 2
                        : (c >> 4) == 14 ? 3
                        : (c >> 3) == 30 ? 4
                                         : 1;
    return back >= need ? n : n - back;
  }
  return n;
}

json::Value choice(const std::string& text, const std::string& finish_reason) {
  json::Value c = json::Value::object();
  c.set("text", json::Value(text));
  c.set("index", json::Value(0));
  c.set("logprobs", json::Value(nullptr));
  c.set("finish_reason", finish_reason.empty() ? json::Value(nullptr) : json::Value(finish_reason));
  return c;
}

json::Value envelope(const std::string& id, int64_t created, const ServedModel& model) {
  json::Value out = json::Value::object();
  out.set("id", json::Value(id));
  out.set("object", json::Value("text_completion"));
  out.set("created", json::Value(created));
  out.set("model", json::Value(model.name));
  return out;
}

json::Value id_array(const std::vector<int32_t>& ids) {
  json::Value a = json::Value::array();
  for (int32_t t : ids) a.push_back(json::Value(static_cast<int64_t>(t)));
  return a;
}

}  // namespace

Result<CompletionRequest> parse_completion_request(std::string_view body,
                                                   const ServedModel& model) {
  DSCORE_ASSIGN_OR_RETURN(json::Value request, json::parse(body, "the request body"));
  if (!request.is_object()) return invalid_argument("the request body must be a JSON object");
  CompletionRequest out;
  GenerationRequest& g = out.generation;
  g.max_new_tokens = 16;  // OpenAI's defaults
  g.sampling.temperature = 1.0;
  const json::Value* prompt = request.find("prompt");
  if (prompt == nullptr) return invalid_argument("\"prompt\" is required");
  if (prompt->is_string()) {
    if (model.tok != nullptr) {
      DSCORE_ASSIGN_OR_RETURN(g.prompt, model.tok->encode(prompt->as_string(), true));
      if (model.tok->special().eos) g.stop_tokens.push_back(*model.tok->special().eos);
    } else if (model.byte_level) {
      for (unsigned char c : prompt->as_string()) g.prompt.push_back(c);
    } else {
      return invalid_argument(
          "this server has no tokenizer (start it with --tokenizer DIR): give \"prompt\" as an "
          "array of token ids");
    }
  } else if (prompt->is_array()) {
    for (const json::Value& id : prompt->items()) {
      if (!id.is_integral() || id.as_int() < 0 || id.as_int() >= model.vocab_size)
        return field_error("prompt", ("a string or an array of token ids below the vocabulary's " +
                                      std::to_string(model.vocab_size))
                                         .c_str());
      g.prompt.push_back(static_cast<int32_t>(id.as_int()));
    }
  } else {
    return field_error("prompt", "a string or an array of token ids");
  }
  if (g.prompt.empty()) return invalid_argument("\"prompt\" is empty");
  for (const json::Member& m : request.members()) {
    const std::string& key = m.key;
    const json::Value& v = m.value;
    if (key == "prompt" || key == "model" || key == "user" ||
        (key == "n" && v.is_integral() && v.as_int() == 1)) {
      continue;
    } else if (key == "max_tokens") {
      if (!v.is_integral() || v.as_int() < 0) return field_error("max_tokens", "an integer >= 0");
      g.max_new_tokens = v.as_int();
    } else if (key == "temperature") {
      if (!v.is_number() || v.as_number() < 0) return field_error("temperature", "a number >= 0");
      g.sampling.temperature = v.as_number();
    } else if (key == "top_p") {
      if (!v.is_number() || v.as_number() <= 0 || v.as_number() > 1)
        return field_error("top_p", "a number in (0, 1]");
      g.sampling.top_p = v.as_number();
    } else if (key == "top_k") {
      if (!v.is_integral() || v.as_int() < -1)
        return field_error("top_k", "an integer (0 or -1: all)");
      g.sampling.top_k = v.as_int() < 0 ? 0 : v.as_int();
    } else if (key == "repetition_penalty") {
      if (!v.is_number() || v.as_number() <= 0)
        return field_error("repetition_penalty", "a number > 0");
      g.sampling.repetition_penalty = v.as_number();
    } else if (key == "seed") {
      if (!v.is_integral()) return field_error("seed", "an integer");
      g.sampling.seed = static_cast<uint64_t>(v.as_int());
    } else if (key == "stream") {
      if (!v.is_bool()) return field_error("stream", "true or false");
      out.stream = v.as_bool();
    } else {
      return invalid_argument(
          "\"" + key +
          "\" is not supported by dscore serve (supported: prompt, max_tokens, "
          "temperature, top_p, top_k, repetition_penalty, seed, stream, model)");
    }
  }
  return out;
}

std::string TextStream::add(int32_t token) {
  tokens_.push_back(token);
  std::string text;
  if (model_.tok != nullptr) {
    auto decoded = model_.tok->decode(tokens_, /*skip_special_tokens=*/true);
    if (!decoded.ok()) return "";
    text = std::move(*decoded);
  } else {
    for (int32_t t : tokens_) text.push_back(static_cast<char>(t));
  }
  const size_t end = complete_utf8(text);
  if (end <= emitted_) return "";
  std::string delta = valid_utf8(text.substr(emitted_, end - emitted_));
  emitted_ = end;
  return delta;
}

std::string completion_body(const std::string& id, int64_t created, const ServedModel& model,
                            const std::string& text, const std::vector<int32_t>& tokens,
                            const std::string& finish_reason, int64_t prompt_tokens) {
  json::Value out = envelope(id, created, model);
  json::Value c = choice(text, finish_reason);
  c.set("tokens", id_array(tokens));
  json::Value choices = json::Value::array();
  choices.push_back(std::move(c));
  out.set("choices", std::move(choices));
  json::Value usage = json::Value::object();
  const auto completion = static_cast<int64_t>(tokens.size());
  usage.set("prompt_tokens", json::Value(prompt_tokens));
  usage.set("completion_tokens", json::Value(completion));
  usage.set("total_tokens", json::Value(prompt_tokens + completion));
  out.set("usage", std::move(usage));
  return json::serialize(out);
}

std::string chunk_body(const std::string& id, int64_t created, const ServedModel& model,
                       const std::string& text, int32_t token, const std::string& finish_reason) {
  json::Value out = envelope(id, created, model);
  json::Value c = choice(text, finish_reason);
  c.set("tokens", id_array(token >= 0 ? std::vector<int32_t>{token} : std::vector<int32_t>{}));
  json::Value choices = json::Value::array();
  choices.push_back(std::move(c));
  out.set("choices", std::move(choices));
  return json::serialize(out);
}

std::string error_body(const std::string& message, const std::string& type) {
  json::Value error = json::Value::object();
  error.set("message", json::Value(message));
  error.set("type", json::Value(type));
  error.set("code", json::Value(nullptr));
  json::Value out = json::Value::object();
  out.set("error", std::move(error));
  return json::serialize(out);
}

}  // namespace dscore::serve
