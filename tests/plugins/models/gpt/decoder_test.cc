// The gpt's KV-cached generation (decoder.h) against its forward pass
// (runner.h), in double precision on the tiny config; MoE blocks refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "decoder.h"
#include "gpt_params.h"
#include "runner.h"
#include "tests/plugins/models/gpt/tiny_gpt.h"
#include "tests/plugins/models/transformer_common/decode_checks.h"
#include "tests/plugins/models/transformer_common/fake_layers.h"
#include "transformer_common/cpu/gemm.h"

DSCORE_PLUGIN_HOST_STORAGE;  // no host attached: the backend allocates with the C allocator

namespace dscore::gpt {
namespace {

using transformer::testing::FakeLayers;
using Backend = cpu::CpuBackend<double>;

class GptDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override { transformer::cpu::load_gemm_library(); }
};

TEST_F(GptDecoderTest, CachedStepsGiveTheForwardPassLogits) {
  const GptConfig c = tiny_config();
  GptParams params(c, 7);
  FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &layers);
  Backend backend;
  GptRunner<Backend> runner(c, params, backend);
  GptDecoder<Backend> decoder(c, params, backend);
  const auto forward_logits = [&](const std::vector<int32_t>& prefix) {
    std::vector<int32_t> window(prefix);
    window.resize(static_cast<size_t>(c.block_size + 1), -1);
    dscore_tensor t{};
    t.struct_size = sizeof t;
    t.data = window.data();
    t.dtype = DSCORE_DTYPE_I32;
    t.device_type = DSCORE_DEVICE_CPU;
    t.numel = static_cast<int64_t>(window.size());
    const dscore_tensor* tensors[] = {&t};
    dscore_batch batch{sizeof(dscore_batch), 1, 1, tensors};
    std::vector<float> logits(static_cast<size_t>(c.vocab_size));
    runner.forward(split_tokens(&batch, c), layers.hooks(), nullptr, logits.data());
    return logits;
  };
  transformer::testing::expect_decode_matches_forward(
      decoder, layers.hooks(), c.block_size, c.vocab_size,
      {{3, 7, 1, 10, 0}, {5, 5, 9}, {4, 2, 8, 6}}, forward_logits, 2e-5);
}

TEST_F(GptDecoderTest, MoeBlocksAreRefusedSoTheHostFallsBack) {
  GptConfig c = tiny_config();
  c.moe.num_experts = 2;
  GptParams params(c, 7);
  Backend backend;
  GptDecoder<Backend> decoder(c, params, backend);
  try {
    decoder.make_cache(1, c.block_size);
    FAIL() << "an MoE gpt's cache";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), DSCORE_UNIMPLEMENTED);
    EXPECT_NE(std::string(e.what()).find("MoE"), std::string::npos);
  }
}

}  // namespace
}  // namespace dscore::gpt
