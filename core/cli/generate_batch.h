// dscore generate --prompts-file: many prompts, one JSON object per line in
// and out, generated together (core/app/batch_generator.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/app/generation.h"
#include "core/tokenizer/tokenizer.h"

namespace dscore::cli {

struct BatchGenerateOptions {
  std::string prompts_file;
  int64_t batch_size = 8;  // sequences decoding together
  int64_t max_new_tokens = 200;
  SamplingOptions sampling;
  bool use_cache = true;
};

// Reads the prompts ({"prompt": "text"} or {"prompt_tokens": [ids]}, with
// optional "max_new_tokens", "temperature", "top_k", "top_p",
// "repetition_penalty", "seed" overriding the options') and writes each
// completion as it finishes to stdout: {"index", "tokens", "text" (text
// prompts), "finish_reason"}. `tok`: the model's tokenizer, null for a
// byte-level model (or none: text prompts are then refused). An exit code.
int generate_prompts_file(InferenceModel& model, const tokenizer::Tokenizer* tok,
                          const BatchGenerateOptions& options);

}  // namespace dscore::cli
