// Text generation with a token model (one "tokens" input of block_size + 1
// int32, forward() output = logits at the last position, as the gpt model):
// open a checkpoint for inference, then sample a continuation token by
// token (sampling.h), against the model's KV cache where it has one
// (batch_generator.h), else with a forward over the last block_size tokens
// per token.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/app/sampling.h"
#include "core/base/status.h"
#include "core/config/json.h"
#include "core/engine/engine.h"
#include "core/engine/environment.h"

namespace dscore {

// Where an inference engine keeps the weights: as the config says (""),
// whole in memory ("none"), or ZeRO-Inference: stage 3 with the parameters
// in host memory ("cpu") or on NVMe under nvme_path ("nvme"), each layer
// gathered as the model runs it and the next ones prefetched.
struct InferenceOffload {
  std::string offload_param;
  std::string nvme_path;
};

// A saved training config turned into an inference config: the same model,
// precision and plugins; batch 1, no monitors or saving, an optimizer
// without state (SGD); stage 0, or stage 3 where the config (or `offload`)
// offloads the parameters (ZeRO-Inference); one rank, or `tensor_parallel`
// ranks splitting the model (autotp_size), without a pipeline or sequence
// or expert parallelism (their checkpoints hold whole tensors).
Result<json::Value> inference_config(json::Value config, const InferenceOffload& offload = {},
                                     int tensor_parallel = 1);

// What the program hands an inference engine: the variables it read
// (engine/environment.h) and the weights' placement.
struct InferenceOptions {
  EngineEnvironment environment;
  InferenceOffload offload;
  // > 1: this process is a rank of a job of that many (its launcher's
  // environment), which split the model as tensor parallelism does.
  int tensor_parallel = 1;
  // The program's heap policy (core/base/process_heap.h, DSCORE_MALLOC)
  // applied before the engine's threads start, as `dscore run` does: not
  // where the weights are offloaded (the start's large transient buffers
  // would stay in the heap).
  bool heap_policy = false;
};

// A one-rank engine holding the weights of the checkpoint in `dir` (tag ""
// = latest), built from the config the checkpoint saved.
struct InferenceModel {
  std::unique_ptr<Engine> engine;
  std::string data_type;  // the saved config's data.type ("text": byte-level tokens)
  // The model section's "from_pretrained" folder (its tokenizer lies
  // there), or "".
  std::string from_pretrained;
  // The model section's block_size and vocab_size; a model without them
  // (gpt2, from_pretrained) has block_size + 1 tokens as its input and
  // the folder's config.json vocab_size.
  int64_t block_size = 0;
  int64_t vocab_size = 0;
};
Result<InferenceModel> open_for_inference(const std::string& dir, const std::string& tag,
                                          const InferenceOptions& options = {});
// The same from a training config file, with the weights the model
// initialises (a "from_pretrained" folder's, or the seed's).
Result<InferenceModel> open_config_for_inference(const std::string& config_path,
                                                 const InferenceOptions& options = {});

// The same from a Hugging Face folder: its config.json's model_type picks
// the model ("gpt2", else "llama", whose plugin reads the Llama, Mistral,
// Mixtral and Qwen families), read with from_pretrained.
Result<InferenceModel> open_hf_for_inference(const std::string& folder,
                                             const InferenceOptions& options = {});

// Which of the three above: a checkpoint folder (and tag), a config file
// or a Hugging Face folder, exactly one of them set.
struct InferenceSource {
  std::string checkpoint, tag, config, hf;
};
Result<InferenceModel> open_inference(const InferenceSource& source,
                                      const InferenceOptions& options = {});

// One forward pass of a token model over a prompt of 1 to block_size tokens
// (then padding): the logits at its last token and, when asked, the mean
// next-token loss over it. Generation's step and `dscore forward`'s.
class TokenForward {
 public:
  // INVALID_ARGUMENT when the model does not take block_size + 1 int32 tokens.
  static Result<TokenForward> create(Engine& engine, int64_t block_size, int64_t vocab_size);
  Status run(const std::vector<int32_t>& tokens, double* loss = nullptr);
  const std::vector<float>& logits() const { return logits_; }  // after run(): vocab_size

 private:
  TokenForward(Engine& engine, int64_t block_size, int64_t vocab_size);
  Engine* engine_;
  int64_t block_size_;
  std::vector<int32_t> window_;  // block_size + 1 tokens, -1 = padding
  std::vector<float> logits_;
};

// Where generate()'s time went: the first step (the prompt's prefill and
// the first new token) and the steps after it (one token each).
struct GenerationTiming {
  bool cached = false;  // decoded against the model's KV cache
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  int64_t decoded_tokens = 0;  // after the first
  double decode_seconds = 0;
};

// Appends up to `max_new_tokens` tokens to `tokens` (the prompt, not
// empty), calling on_token after each; generation stops early when it
// returns false (an end-of-sequence token). use_cache false: forward
// passes even where the model has a KV cache.
Status generate(Engine& engine, int64_t block_size, int64_t vocab_size,
                std::vector<int32_t>* tokens, int64_t max_new_tokens,
                const SamplingOptions& options, const std::function<bool(int32_t)>& on_token,
                bool use_cache = true, GenerationTiming* timing = nullptr);

}  // namespace dscore
