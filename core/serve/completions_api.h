// OpenAI's /v1/completions as `dscore serve` answers it: the request's
// fields (prompt as text or token ids, max_tokens, temperature, top_p,
// seed, stream, and top_k and repetition_penalty as vLLM and TGI take
// them), the response and its streamed chunks, and error bodies.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/app/batch_generator.h"
#include "core/base/status.h"
#include "core/tokenizer/tokenizer.h"

namespace dscore::serve {

// What the server knows of its model's text.
struct ServedModel {
  std::string name;                           // "model" in responses
  const tokenizer::Tokenizer* tok = nullptr;  // null: byte-level or ids only
  bool byte_level = false;                    // trained on data.type "text"
  int64_t vocab_size = 0;
};

struct CompletionRequest {
  GenerationRequest generation;
  bool stream = false;
};

// The request body; INVALID_ARGUMENT names the field and what it must be.
Result<CompletionRequest> parse_completion_request(std::string_view body, const ServedModel& model);

// Text of generated tokens as they come: each token's new complete UTF-8
// characters (a character split over tokens waits for its end).
class TextStream {
 public:
  explicit TextStream(const ServedModel& model) : model_(model) {}
  // The text this token completes (special tokens give none).
  std::string add(int32_t token);

 private:
  const ServedModel& model_;
  std::vector<int32_t> tokens_;
  size_t emitted_ = 0;  // bytes of the decoded text already returned
};

// A completion's body ("object": "text_completion"); `tokens` as dscore's
// extension beside the text.
std::string completion_body(const std::string& id, int64_t created, const ServedModel& model,
                            const std::string& text, const std::vector<int32_t>& tokens,
                            const std::string& finish_reason, int64_t prompt_tokens);
// One streamed chunk: a token's text, and on the last the finish reason.
std::string chunk_body(const std::string& id, int64_t created, const ServedModel& model,
                       const std::string& text, int32_t token, const std::string& finish_reason);
// {"error": {"message", "type", "code"}}.
std::string error_body(const std::string& message, const std::string& type);

}  // namespace dscore::serve
