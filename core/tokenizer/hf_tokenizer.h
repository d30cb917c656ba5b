// Hugging Face tokenizer.json: byte-level BPE (GPT-2, Llama 3). What is
// read: added_tokens (split out of the text before anything else, longest
// first), normalizer null, pre_tokenizer ByteLevel / Split (Regex or String
// pattern, behaviour Isolated or Removed) / a Sequence of them, model BPE
// (vocab, merges as "a b" or ["a", "b"], unk_token, fuse_unk,
// ignore_merges), post_processor TemplateProcessing / ByteLevel / a Sequence
// of them, decoder ByteLevel or null. Any other kind is an error naming the
// file, the field and the kind.
#pragma once

#include <memory>
#include <string>

#include "core/base/status.h"
#include "core/tokenizer/special_tokens.h"
#include "core/tokenizer/tokenizer.h"

namespace dscore::tokenizer {

Result<std::unique_ptr<Tokenizer>> load_hf_tokenizer(const std::string& path,
                                                     const SpecialTokenNames& names);

// GPT-2's older files, DIR/vocab.json and DIR/merges.txt (what the slow
// GPT2Tokenizer reads): the same byte-level BPE with GPT-2's pattern; the
// bos/eos tokens of tokenizer_config.json stay whole in the text.
Result<std::unique_ptr<Tokenizer>> load_gpt2_vocab_merges(const std::string& dir,
                                                          const SpecialTokenNames& names);

}  // namespace dscore::tokenizer
