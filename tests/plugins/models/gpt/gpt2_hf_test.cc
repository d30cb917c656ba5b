// plugins/models/gpt/gpt2_hf.cc: GPT-2's config.json read into the gpt
// model's hyperparameters (every option the kernels do not compute refused
// by name), the Conv1D weights named, and the export's config.json.
// Weights against transformers: tests/external/hf/check_gpt2.py.
#include "gpt2_hf.h"

#include <gtest/gtest.h>

#include <dscore/cpp/plugin.hpp>

#include <string>

#include "../hf_common/hf_config.h"

namespace dscore::gpt {
namespace {

// transformers' GPT2Config() defaults, shrunk.
const std::string kConfig = R"({"model_type": "gpt2", "n_layer": 3, "n_head": 4, "n_embd": 64,
  "n_positions": 64, "vocab_size": 300, "activation_function": "gelu_new", "n_inner": null,
  "layer_norm_epsilon": 1e-05, "scale_attn_weights": true, "resid_pdrop": 0.1,
  "scale_attn_by_inverse_layer_idx": false, "reorder_and_upcast_attn": false,
  "bos_token_id": 50256, "torch_dtype": "float32"})";

// kConfig with `key` set to the JSON `value`.
std::string with(const std::string& key, const std::string& value) {
  return hf::write_config_json(kConfig, {{key, value}});
}

std::string error_of(const std::string& text, int64_t block_size = 0) {
  try {
    gpt2_config(hf::HfConfig(text, "DIR/config.json"), block_size);
  } catch (const sdk::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(Gpt2Config, ReadsTheHyperparametersAndBlockSize) {
  const GptConfig g = gpt2_config(hf::HfConfig(kConfig, "c.json"), 0);
  EXPECT_EQ(g.n_layer, 3);
  EXPECT_EQ(g.n_head, 4);
  EXPECT_EQ(g.n_embd, 64);
  EXPECT_EQ(g.vocab_size, 300);
  EXPECT_EQ(g.n_positions, 64);
  EXPECT_EQ(g.block_size, 64);  // 0 = n_positions
  const GptConfig shorter = gpt2_config(hf::HfConfig(kConfig, "c.json"), 16);
  EXPECT_EQ(shorter.block_size, 16);
  EXPECT_EQ(shorter.positions(), 64);  // wpe keeps every row for the export
  EXPECT_NO_THROW(
      gpt2_config(hf::HfConfig(with("activation_function", "\"gelu_pytorch_tanh\""), "c.json"), 0));
  EXPECT_NO_THROW(gpt2_config(hf::HfConfig(with("n_inner", "256"), "c.json"), 0));
}

TEST(Gpt2Config, UnsupportedOptionsAreNamedWithTheFile) {
  const std::pair<std::string, std::string> cases[] = {
      {"activation_function", "\"relu\""},
      {"scale_attn_weights", "false"},
      {"scale_attn_by_inverse_layer_idx", "true"},
      {"reorder_and_upcast_attn", "true"},
      {"add_cross_attention", "true"},
      {"tie_word_embeddings", "false"},
      {"layer_norm_epsilon", "1e-6"},
      {"n_inner", "100"},
  };
  for (const auto& [key, value] : cases) {
    const std::string m = error_of(with(key, value));
    EXPECT_NE(m.find("DIR/config.json: " + key), std::string::npos) << key << ": " << m;
    EXPECT_NE(m.find("not supported by dscore's gpt2 model"), std::string::npos) << m;
  }
  EXPECT_NE(error_of(with("model_type", "\"llama\"")).find("model_type is \"llama\""),
            std::string::npos);
  EXPECT_NE(error_of(with("n_head", "5")).find("n_embd 64 is not divisible by n_head 5"),
            std::string::npos);
  EXPECT_NE(error_of(hf::write_config_json(kConfig, {{"n_layer", "null"}}))
                .find("DIR/config.json has no \"n_layer\""),
            std::string::npos);
  const std::string longer = error_of(kConfig, 65);
  EXPECT_NE(longer.find("model.block_size 65 is more than DIR/config.json's n_positions 64"),
            std::string::npos)
      << longer;
}

TEST(Gpt2Hf, Conv1DWeightsAreTheTransposedOnes) {
  for (const char* name :
       {"transformer.h.0.attn.c_attn.weight", "transformer.h.11.attn.c_proj.weight",
        "transformer.h.2.mlp.c_fc.weight", "transformer.h.2.mlp.c_proj.weight"})
    EXPECT_TRUE(gpt2_transposed(name)) << name;
  for (const char* name :
       {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.attn.c_attn.bias",
        "transformer.h.0.ln_1.weight", "transformer.ln_f.weight"})
    EXPECT_FALSE(gpt2_transposed(name)) << name;
}

TEST(Gpt2Hf, ExportConfigKeepsTheFoldersKeysAndSetsTheModels) {
  hf::HfConfig base(kConfig, "c.json");
  GptConfig g = gpt2_config(base, 32);
  const hf::HfConfig out(gpt2_config_json(g, DSCORE_DTYPE_BF16, &base), "out.json");
  EXPECT_EQ(out.integer("n_positions"), 64);
  EXPECT_EQ(out.integer("bos_token_id"), 50256);  // kept
  EXPECT_EQ(out.string("dtype"), "bfloat16");
  EXPECT_EQ(out.string("torch_dtype"), "bfloat16");  // the folder's older key, kept true
  EXPECT_DOUBLE_EQ(out.number("resid_pdrop"), 0.1);  // the folder's, kept

  GptConfig scratch;  // a gpt trained from scratch: no folder
  scratch.n_layer = 2;
  scratch.n_head = 2;
  scratch.n_embd = 16;
  scratch.block_size = 8;
  scratch.vocab_size = 256;
  const hf::HfConfig fresh(gpt2_config_json(scratch, DSCORE_DTYPE_F32, nullptr), "out.json");
  EXPECT_EQ(fresh.string("model_type"), "gpt2");
  EXPECT_EQ(fresh.integer("n_positions"), 8);
  EXPECT_EQ(fresh.string("dtype"), "float32");
  EXPECT_FALSE(fresh.has("torch_dtype"));
  EXPECT_DOUBLE_EQ(fresh.number("resid_pdrop"), 0.0);
  EXPECT_NO_THROW(gpt2_config(fresh, 0));  // what it writes, it reads back
}

}  // namespace
}  // namespace dscore::gpt
