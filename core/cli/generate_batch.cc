#include "core/cli/generate_batch.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include "core/app/batch_generator.h"
#include "core/base/strings.h"
#include "core/cli/commands.h"
#include "core/config/json.h"

namespace dscore::cli {
namespace {

struct Prompt {
  GenerationRequest request;
  bool text = false;  // a text prompt: the completion's text is printed too
};

Status read_number(const json::Value& line, const char* key, double* out) {
  const json::Value* v = line.find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return invalid_argument(std::string("\"") + key + "\" must be a number");
  *out = v->as_number();
  return Status::Ok();
}
Status read_int(const json::Value& line, const char* key, int64_t* out) {
  const json::Value* v = line.find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_integral() || v->as_int() < 0)
    return invalid_argument(std::string("\"") + key + "\" must be an integer >= 0");
  *out = v->as_int();
  return Status::Ok();
}

// One line of the prompts file.
Result<Prompt> parse_prompt(const json::Value& line, const InferenceModel& model,
                            const tokenizer::Tokenizer* tok, const BatchGenerateOptions& options) {
  if (!line.is_object()) return invalid_argument("a line must be a JSON object");
  Prompt p;
  p.request.max_new_tokens = options.max_new_tokens;
  p.request.sampling = options.sampling;
  const json::Value* text = line.find("prompt");
  const json::Value* ids = line.find("prompt_tokens");
  if ((text == nullptr) == (ids == nullptr))
    return invalid_argument("give exactly one of \"prompt\" (text) and \"prompt_tokens\" (ids)");
  if (text != nullptr) {
    if (!text->is_string()) return invalid_argument("\"prompt\" must be a string");
    p.text = true;
    if (tok != nullptr) {
      DSCORE_ASSIGN_OR_RETURN(p.request.prompt,
                              tok->encode(text->as_string(), /*add_special_tokens=*/true));
      if (tok->special().eos) p.request.stop_tokens.push_back(*tok->special().eos);
    } else if (model.data_type == "text") {
      for (unsigned char c : text->as_string()) p.request.prompt.push_back(c);
    } else {
      return invalid_argument(
          "a text prompt needs the model's tokenizer (--tokenizer DIR) or a byte-level model; "
          "give \"prompt_tokens\" instead");
    }
  } else {
    if (!ids->is_array()) return invalid_argument("\"prompt_tokens\" must be an array of ids");
    for (const json::Value& id : ids->items()) {
      if (!id.is_integral()) return invalid_argument("\"prompt_tokens\" must hold integer ids");
      p.request.prompt.push_back(static_cast<int32_t>(id.as_int()));
    }
  }
  DSCORE_RETURN_IF_ERROR(read_int(line, "max_new_tokens", &p.request.max_new_tokens));
  DSCORE_RETURN_IF_ERROR(read_number(line, "temperature", &p.request.sampling.temperature));
  DSCORE_RETURN_IF_ERROR(read_int(line, "top_k", &p.request.sampling.top_k));
  DSCORE_RETURN_IF_ERROR(read_number(line, "top_p", &p.request.sampling.top_p));
  DSCORE_RETURN_IF_ERROR(
      read_number(line, "repetition_penalty", &p.request.sampling.repetition_penalty));
  int64_t seed = static_cast<int64_t>(p.request.sampling.seed);
  DSCORE_RETURN_IF_ERROR(read_int(line, "seed", &seed));
  p.request.sampling.seed = static_cast<uint64_t>(seed);
  if (p.request.sampling.temperature < 0 || p.request.sampling.top_p <= 0 ||
      p.request.sampling.top_p > 1 || p.request.sampling.repetition_penalty <= 0)
    return invalid_argument("temperature must be >= 0, top_p in (0, 1] and repetition_penalty > 0");
  return p;
}

// The completion's line: its tokens (a stop token included, as
// transformers' generate() returns it) and their text.
std::string completion_line(int64_t index, const Prompt& prompt, const std::vector<int32_t>& tokens,
                            const std::string& reason, const tokenizer::Tokenizer* tok) {
  json::Value out = json::Value::object();
  out.set("index", json::Value(index));
  json::Value ids = json::Value::array();
  for (int32_t t : tokens) ids.push_back(json::Value(static_cast<int64_t>(t)));
  out.set("tokens", std::move(ids));
  if (prompt.text) {
    std::string text;
    if (tok != nullptr) {
      auto decoded = tok->decode(tokens, /*skip_special_tokens=*/true);
      text = decoded.ok() ? *decoded : "";
    } else {
      for (int32_t t : tokens) text.push_back(static_cast<char>(t));
    }
    out.set("text", json::Value(valid_utf8(text)));
  }
  out.set("finish_reason", json::Value(reason));
  return json::serialize(out);
}

}  // namespace

int generate_prompts_file(InferenceModel& model, const tokenizer::Tokenizer* tok,
                          const BatchGenerateOptions& options) {
  std::ifstream in(options.prompts_file);
  if (!in) {
    std::fprintf(stderr, "error: cannot read the prompts file %s\n", options.prompts_file.c_str());
    return kExitUsage;
  }
  std::vector<Prompt> prompts;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = options.prompts_file + " line " + std::to_string(number);
    auto line = json::parse(text, where);
    Result<Prompt> prompt =
        line.ok() ? parse_prompt(*line, model, tok, options) : Result<Prompt>(line.status());
    if (!prompt.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", where.c_str(), prompt.status().message().c_str());
      return kExitUsage;
    }
    prompts.push_back(std::move(*prompt));
  }
  auto generator = BatchGenerator::create(
      *model.engine, model.block_size, model.vocab_size, options.batch_size,
      options.use_cache ? BatchGenerator::CacheMode::kAuto : BatchGenerator::CacheMode::kOff);
  if (!generator.ok()) {
    std::fprintf(stderr, "error: %s\n", generator.status().message().c_str());
    return kExitFailure;
  }
  std::map<int64_t, size_t> index_of;  // generator id -> prompt
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = (*generator)->add(prompts[i].request);
    if (!id.ok()) {
      std::fprintf(stderr, "error: %s line %zu: %s\n", options.prompts_file.c_str(), i + 1,
                   id.status().message().c_str());
      return kExitUsage;
    }
    index_of[*id] = i;
  }
  std::vector<std::vector<int32_t>> generated(prompts.size());
  while (!(*generator)->idle()) {
    auto events = (*generator)->step();
    if (!events.ok()) {
      std::fprintf(stderr, "error: %s\n", events.status().message().c_str());
      return kExitFailure;
    }
    for (const GenerationEvent& e : *events) {
      const size_t i = index_of.at(e.id);
      if (e.token >= 0) generated[i].push_back(e.token);  // a stop token too
      if (!e.finished) continue;
      const std::string line =
          completion_line(static_cast<int64_t>(i), prompts[i], generated[i], e.finish_reason, tok);
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  }
  return kExitOk;
}

}  // namespace dscore::cli
