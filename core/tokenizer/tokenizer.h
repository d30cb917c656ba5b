// Text <-> token ids for the tokenizers of Hugging Face model folders:
// load_tokenizer(DIR) reads DIR/tokenizer.json (Hugging Face tokenizers'
// format; byte-level BPE as GPT-2 and Llama 3 use) or, without one,
// DIR/tokenizer.model (SentencePiece, as Llama 2 uses). docs/user-guide.md
// (Tokenizers) lists what is supported; anything else is an error naming the
// file, the field and the kind.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace dscore::tokenizer {

struct SpecialTokens {
  std::optional<int32_t> bos;  // beginning of sequence
  std::optional<int32_t> eos;  // end of sequence (generation stops there)
};

// Immutable after loading; encode and decode are thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text` (UTF-8; invalid bytes are encoded as they are where the
  // kind allows). add_special_tokens: add what Hugging Face's
  // `tokenizer(text)` adds by default (the BOS of Llama 2 and Llama 3; nothing
  // for GPT-2). INVALID_ARGUMENT for text the vocabulary cannot encode.
  virtual Result<std::vector<int32_t>> encode(std::string_view text,
                                              bool add_special_tokens) const = 0;

  // The bytes `ids` stand for (not necessarily valid UTF-8 when a multi-byte
  // character is cut). skip_special_tokens drops special tokens (BOS, EOS,
  // ...). INVALID_ARGUMENT names an id that is not in the vocabulary.
  virtual Result<std::string> decode(const std::vector<int32_t>& ids,
                                     bool skip_special_tokens) const = 0;

  // One more than the largest id (what a model's vocab_size must reach).
  virtual int64_t vocab_size() const = 0;

  // The id of a token given by its text (a special token such as
  // "<|endoftext|>", or any vocabulary entry), or nullopt.
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;

  const SpecialTokens& special() const { return special_; }
  // e.g. "byte-level BPE from /m/tokenizer.json (50257 tokens)".
  const std::string& description() const { return description_; }

 protected:
  SpecialTokens special_;
  std::string description_;
};

// The tokenizer in folder `dir`: tokenizer.json when present, else
// tokenizer.model, else GPT-2's vocab.json + merges.txt; also
// tokenizer.model when tokenizer.json is of a kind dscore does not read
// (Llama 2 folders hold both). BOS/EOS come from tokenizer_config.json or
// special_tokens_map.json ("bos_token", "eos_token") when present, else from
// the tokenizer file itself. NOT_FOUND when the folder holds none of these.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir);

}  // namespace dscore::tokenizer
