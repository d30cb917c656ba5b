// SentencePiece tokenizer.model (Llama 2) through libsentencepiece, the only
// place it is used. Encoding adds BOS (and EOS) as Hugging Face's
// LlamaTokenizer does by default: tokenizer_config.json's add_bos_token
// (default true) and add_eos_token (default false).
#pragma once

#include <memory>
#include <string>

#include "core/base/status.h"
#include "core/tokenizer/special_tokens.h"
#include "core/tokenizer/tokenizer.h"

namespace dscore::tokenizer {

Result<std::unique_ptr<Tokenizer>> load_sentencepiece_tokenizer(const std::string& path,
                                                                const SpecialTokenNames& names);

}  // namespace dscore::tokenizer
