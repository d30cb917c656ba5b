// GPT's batches: the shared token split (plugins/models/transformer_common/tokens.h)
// with errors that name the gpt model.
#pragma once

#include "../transformer_common/tokens.h"

namespace dscore::gpt {

using transformer::SplitTokens;

inline SplitTokens split_tokens(const dscore_batch* batch, int64_t block_size, int64_t vocab_size) {
  return transformer::split_tokens(batch, block_size, vocab_size, "gpt");
}

}  // namespace dscore::gpt
