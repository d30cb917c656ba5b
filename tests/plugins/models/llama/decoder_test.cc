// The llama's KV-cached generation (decoder.h) against its forward pass
// (runner.h), in double precision on the tiny configs: grouped-query
// attention, tied and untied heads, Llama 3 rope scaling, Qwen3's q/k norms,
// Qwen2's biases, Mixtral's and Qwen2-MoE's experts; and the cache's limits.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "decoder.h"
#include "llama_params.h"
#include "runner.h"
#include "tests/plugins/models/llama/tiny_llama.h"
#include "tests/plugins/models/transformer_common/decode_checks.h"
#include "tests/plugins/models/transformer_common/fake_layers.h"
#include "transformer_common/cpu/gemm.h"

DSCORE_PLUGIN_HOST_STORAGE;  // no host attached: the backend allocates with the C allocator

namespace dscore::llama {
namespace {

using transformer::testing::FakeLayers;
using Backend = cpu::CpuBackend<double>;

class LlamaDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override { transformer::cpu::load_gemm_library(); }
};

void expect_decode_matches_forward(const LlamaConfig& c) {
  LlamaParams params(c, 7);
  FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &layers);
  Backend backend;
  LlamaRunner<Backend> runner(c, params, backend);
  LlamaDecoder<Backend> decoder(c, params, backend);
  const auto forward_logits = [&](const std::vector<int32_t>& prefix) {
    std::vector<int32_t> window(prefix);
    window.resize(static_cast<size_t>(c.block_size + 1), -1);
    std::vector<float> logits(static_cast<size_t>(c.vocab_size));
    runner.forward(batch_of(std::move(window), 1, c), layers.hooks(), nullptr, logits.data());
    return logits;
  };
  transformer::testing::expect_decode_matches_forward(
      decoder, layers.hooks(), c.block_size, c.vocab_size,
      {{3, 7, 1, 10, 0}, {5, 5, 9}, {4, 2, 8, 6}}, forward_logits, 2e-5);
}

TEST_F(LlamaDecoderTest, CachedStepsGiveTheForwardPassLogits) {
  expect_decode_matches_forward(tiny_config(false));
  expect_decode_matches_forward(tiny_config(true));
}

TEST_F(LlamaDecoderTest, CachedStepsGiveTheForwardPassLogitsWithLlama3Rope) {
  LlamaConfig c = tiny_config(false);
  c.rope_scaling.llama3 = true;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 16;
  expect_decode_matches_forward(c);
}

TEST_F(LlamaDecoderTest, CachedStepsGiveTheForwardPassLogitsForQwen) {
  LlamaConfig qwen3 = tiny_config(false);
  qwen3.architecture = Architecture::kQwen3;
  expect_decode_matches_forward(qwen3);
  LlamaConfig qwen2 = tiny_config(true);
  qwen2.architecture = Architecture::kQwen2;
  expect_decode_matches_forward(qwen2);
}

TEST_F(LlamaDecoderTest, CachedStepsGiveTheForwardPassLogitsThroughExperts) {
  LlamaConfig mixtral = tiny_config(false);
  mixtral.architecture = Architecture::kMixtral;
  mixtral.num_local_experts = 3;
  mixtral.num_experts_per_tok = 2;
  expect_decode_matches_forward(mixtral);
  LlamaConfig qwen2_moe = mixtral;
  qwen2_moe.architecture = Architecture::kQwen2Moe;
  qwen2_moe.shared_expert_intermediate_size = 10;
  qwen2_moe.decoder_sparse_step = 2;
  expect_decode_matches_forward(qwen2_moe);
}

TEST_F(LlamaDecoderTest, TheCacheRefusesMorePositionsThanTheContextAndBadBatches) {
  const LlamaConfig c = tiny_config(false);
  LlamaParams params(c, 7);
  Backend backend;
  LlamaDecoder<Backend> decoder(c, params, backend);
  try {
    decoder.make_cache(1, c.block_size + 1);
    FAIL() << "a cache past the context";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), DSCORE_OUT_OF_RANGE);
    EXPECT_NE(std::string(e.what()).find("exceeds the model's context of 5"), std::string::npos);
  }
  auto cache = decoder.make_cache(2, c.block_size);
  const int32_t twice[] = {1, 1};
  const int64_t positions[] = {0, 0}, lengths[] = {1, 1};
  const int32_t tokens[] = {1, 2};
  const dscore_decode_batch same_slot{
      sizeof(dscore_decode_batch), 2, twice, positions, lengths, tokens};
  EXPECT_THROW(sdk::checked_decode_batch(&same_slot, *cache), sdk::Error);
  const int32_t slot = 0;
  const int64_t late = 4, two = 2;
  const dscore_decode_batch past_end{sizeof(dscore_decode_batch), 1, &slot, &late, &two, tokens};
  try {
    sdk::checked_decode_batch(&past_end, *cache);
    FAIL() << "tokens past the cache";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("do not fit the cache's 5 positions"), std::string::npos);
  }
}

}  // namespace
}  // namespace dscore::llama
