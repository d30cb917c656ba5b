// GPT's batches: the shared token split (plugins/models/transformer_common/tokens.h)
// with errors that name the gpt model.
#pragma once

#include "../transformer_common/tokens.h"
#include "gpt_config.h"

namespace dscore::gpt {

using transformer::SplitTokens;

inline SplitTokens split_tokens(const dscore_batch* batch, const GptConfig& config) {
  return transformer::split_tokens(batch, config.block_size, config.vocab_size, "gpt",
                                   config.sequence());
}

}  // namespace dscore::gpt
