// `dscore export-hf` and `dscore forward` through the real executable: a
// tiny gpt trained from scratch by `dscore run` and exported as a Hugging
// Face folder (GPT-2's names, the Conv1D weights transposed, config.json,
// shards and bf16 on request), checked against `dscore zero-to-fp32` of the
// same checkpoint; a model with no Hugging Face form is refused naming
// zero-to-fp32; forward prints a loss and the logits per prompt.
// transformers loading the export: tests/external/hf/check_gpt2.py.
#include <gtest/gtest.h>

#include <dscore/cpp/dtype.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "core/config/json.h"
#include "tests/core/cli/process.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

class ExportHfCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("dscore_cli_export_hf");
    std::string text;
    for (int i = 0; i < 400; ++i) text += "abcdefg ";
    dir_->write("corpus.txt", text);
    const std::string config = R"({
      "train_batch_size": 4, "train_steps": 2, "seed": 5,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "model": {"type": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 8, "vocab_size": 256},
      "data": {"type": "text", "path": ")" +
                               (dir_->path() / "corpus.txt").string() + R"("},
      "checkpoint_dir": ")" + (dir_->path() / "ckpt").string() +
                               R"(", "save_interval": 2})";
    trained_ = new ProcessResult(
        run_dscore({"run", "--config", dir_->write("ds_config.json", config).string()}));
    fp32_ = new ProcessResult(run_dscore({"zero-to-fp32", checkpoint(), path("fp32")}));
  }
  static void TearDownTestSuite() {
    delete fp32_;
    delete trained_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_EQ(trained_->exit_code, 0) << trained_->describe();
    ASSERT_EQ(fp32_->exit_code, 0) << fp32_->describe();
  }
  static std::string checkpoint() { return (dir_->path() / "ckpt").string(); }
  static std::string path(const std::string& name) { return (dir_->path() / name).string(); }

  // The whole tensor `name` of a safetensors file as fp32.
  static std::vector<float> tensor(const std::string& file, const std::string& name,
                                   std::vector<int64_t>* shape = nullptr,
                                   dscore_dtype* dtype = nullptr) {
    auto reader = checkpoint::SafetensorsReader::open(file);
    EXPECT_TRUE(reader.ok()) << reader.status().message();
    if (!reader.ok()) return {};
    const checkpoint::TensorInfo* t = reader->find(name);
    EXPECT_NE(t, nullptr) << name << " not in " << file;
    if (t == nullptr) return {};
    if (shape != nullptr) *shape = t->shape;
    if (dtype != nullptr) *dtype = t->dtype;
    std::vector<char> raw(t->bytes);
    EXPECT_TRUE(reader->read(*t, 0, t->bytes, raw.data()).ok());
    std::vector<float> out(static_cast<size_t>(t->numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      if (t->dtype == DSCORE_DTYPE_F32) {
        std::memcpy(&out[i], raw.data() + 4 * i, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        out[i] = sdk::bf16_to_float(h);
      }
    }
    return out;
  }

  static TempDir* dir_;
  static ProcessResult* trained_;
  static ProcessResult* fp32_;
};
TempDir* ExportHfCommand::dir_ = nullptr;
ProcessResult* ExportHfCommand::trained_ = nullptr;
ProcessResult* ExportHfCommand::fp32_ = nullptr;

TEST_F(ExportHfCommand, GptExportsGpt2NamesLayoutsAndConfig) {
  ProcessResult r = run_dscore({"export-hf", checkpoint(), path("hf")});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("exported model 'gpt'"), std::string::npos) << r.out;

  auto config = json::parse(read_text_file(path("hf") + "/config.json"), "config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->find("model_type")->as_string(), "gpt2");
  EXPECT_EQ(config->find("architectures")->items()[0].as_string(), "GPT2LMHeadModel");
  EXPECT_EQ(config->find("n_layer")->as_int(), 2);
  EXPECT_EQ(config->find("n_embd")->as_int(), 16);
  EXPECT_EQ(config->find("n_positions")->as_int(), 8);
  EXPECT_EQ(config->find("vocab_size")->as_int(), 256);
  EXPECT_EQ(config->find("activation_function")->as_string(), "gelu_new");
  EXPECT_EQ(config->find("dtype")->as_string(), "float32");
  EXPECT_EQ(config->find("resid_pdrop")->as_number(), 0.0);  // dscore's gpt has no dropout

  const std::string hf = path("hf") + "/model.safetensors",
                    fp32 = path("fp32") + "/model.safetensors";
  // A Conv1D weight: (in, out) = the transpose of dscore's (out, in).
  std::vector<int64_t> shape;
  const std::vector<float> conv = tensor(hf, "transformer.h.1.attn.c_attn.weight", &shape);
  const std::vector<float> linear = tensor(fp32, "transformer.h.1.attn.c_attn.weight");
  ASSERT_EQ(shape, (std::vector<int64_t>{16, 48}));
  ASSERT_EQ(conv.size(), linear.size());
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t j = 0; j < 48; ++j) ASSERT_EQ(conv[i * 48 + j], linear[j * 16 + i]) << i << j;
  // The rest keep their layout.
  EXPECT_EQ(tensor(hf, "transformer.wte.weight", &shape), tensor(fp32, "transformer.wte.weight"));
  EXPECT_EQ(shape, (std::vector<int64_t>{256, 16}));
  EXPECT_EQ(tensor(hf, "transformer.h.0.ln_2.bias"), tensor(fp32, "transformer.h.0.ln_2.bias"));
  EXPECT_FALSE(fs::exists(path("hf") + "/model.safetensors.index.json"));
}

TEST_F(ExportHfCommand, ShardsAndBf16OnRequest) {
  ProcessResult r = run_dscore(
      {"export-hf", checkpoint(), path("hf_bf16"), "--max-shard-size", "4KB", "--dtype", "bf16"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto index =
      json::parse(read_text_file(path("hf_bf16") + "/model.safetensors.index.json"), "index");
  ASSERT_TRUE(index.ok()) << index.status().message();
  const json::Value* map = index->find("weight_map");
  ASSERT_NE(map, nullptr);
  const std::string file = map->find("transformer.h.0.mlp.c_proj.weight")->as_string();
  EXPECT_NE(file, "model.safetensors");
  EXPECT_NE(file.find("-of-"), std::string::npos) << file;
  std::vector<int64_t> shape;
  dscore_dtype dtype = DSCORE_DTYPE_INVALID;
  const std::vector<float> bf16 =
      tensor(path("hf_bf16") + "/" + file, "transformer.h.0.mlp.c_proj.weight", &shape, &dtype);
  EXPECT_EQ(dtype, DSCORE_DTYPE_BF16);
  EXPECT_EQ(shape, (std::vector<int64_t>{64, 16}));  // (in 4C, out C)
  const std::vector<float> fp32 =
      tensor(path("fp32") + "/model.safetensors", "transformer.h.0.mlp.c_proj.weight");
  ASSERT_EQ(bf16.size(), fp32.size());
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 16; ++j)
      ASSERT_EQ(bf16[i * 16 + j], sdk::bf16_to_float(sdk::float_to_bf16(fp32[j * 64 + i])));
  auto config = json::parse(read_text_file(path("hf_bf16") + "/config.json"), "config.json");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->find("dtype")->as_string(), "bfloat16");
}

TEST_F(ExportHfCommand, AModelWithoutAHuggingFaceFormIsRefusedNamingZeroToFp32) {
  const std::string config = R"({"train_batch_size": 4, "train_steps": 1,
      "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "model": {"type": "mlp"},
      "checkpoint_dir": ")" + path("mlp_ckpt") +
                             R"(", "save_interval": 1})";
  ProcessResult trained = run_dscore({"run", "--config", dir_->write("mlp.json", config).string()});
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  ProcessResult r = run_dscore({"export-hf", path("mlp_ckpt"), path("mlp_hf")});
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_NE(r.err.find("model 'mlp'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cannot be exported to a Hugging Face folder"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dscore zero-to-fp32 " + path("mlp_ckpt")), std::string::npos) << r.err;
}

TEST_F(ExportHfCommand, UsageErrorsExitTwo) {
  EXPECT_EQ(run_dscore({"export-hf", checkpoint()}).exit_code, 2);
  ProcessResult r = run_dscore({"export-hf", checkpoint(), path("x"), "--dtype", "fp8"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--dtype must be fp32, bf16 or fp16"), std::string::npos) << r.err;
  EXPECT_EQ(run_dscore({"export-hf", checkpoint(), path("x"), "--max-shard-size", "5XB"}).exit_code,
            2);
}

TEST_F(ExportHfCommand, ForwardPrintsLossAndLogitsPerPrompt) {
  ProcessResult r =
      run_dscore({"forward", "--checkpoint", checkpoint(), "--tokens", "97,98,99;100"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<std::string> lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto row = json::parse(lines[i], "line");
    ASSERT_TRUE(row.ok()) << lines[i];
    EXPECT_EQ(row->find("prompt")->as_int(), static_cast<int64_t>(i));
    EXPECT_EQ(row->find("logits")->items().size(), 256u);
    // One token has no next-token target: its loss is null.
    EXPECT_EQ(row->find("loss")->is_null(), i == 1) << lines[i];
  }
  EXPECT_GT(json::parse(lines[0], "line")->find("loss")->as_number(), 0.0);
  EXPECT_EQ(run_dscore({"forward", "--checkpoint", checkpoint()}).exit_code, 2);  // no tokens
  EXPECT_EQ(run_dscore({"forward", "--checkpoint", checkpoint(), "--tokens", "1,x"}).exit_code, 2);
  ProcessResult longer = run_dscore(
      {"forward", "--checkpoint", checkpoint(), "--tokens", "1,2,3,4,5,6,7,8,9"});  // > block 8
  EXPECT_EQ(longer.exit_code, 2);
  EXPECT_NE(longer.err.find("more than the block size 8"), std::string::npos) << longer.err;
}

}  // namespace
}  // namespace dscore::testing
