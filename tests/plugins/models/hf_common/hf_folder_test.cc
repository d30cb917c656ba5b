// plugins/models/hf_common/hf_folder.cc: a Hugging Face folder written by
// hand (safetensors as the format defines it), read back slice by slice.
#include "hf_folder.h"

#include <gtest/gtest.h>

#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/plugin.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hf_config.h"

namespace dscore::hf {
namespace {

namespace fs = std::filesystem;

struct Tensor {
  std::string name;
  std::string dtype;  // F32, BF16, F16, I8
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// A safetensors file: 8-byte length, JSON header, data.
void write_safetensors(const fs::path& path, const std::vector<Tensor>& tensors) {
  std::string data, header = "{\"__metadata__\": {\"format\": \"pt\"}";
  for (const Tensor& t : tensors) {
    const size_t begin = data.size();
    for (float v : t.values) {
      if (t.dtype == "F32") {
        data.append(reinterpret_cast<const char*>(&v), 4);
      } else if (t.dtype == "I8") {
        data.push_back(static_cast<char>(v));
      } else {
        const uint16_t h = t.dtype == "BF16" ? sdk::float_to_bf16(v) : sdk::float_to_half(v);
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header += ", \"" + t.name + "\": {\"dtype\": \"" + t.dtype +
              "\", \"shape\": " + shape_text(t.shape) + ", \"data_offsets\": [" +
              std::to_string(begin) + ", " + std::to_string(data.size()) + "]}";
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
}

std::vector<float> iota(int64_t n, float scale = 0.25f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * static_cast<float>(i - n / 2);
  return v;
}

class HfFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dscore_hf_folder_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << R"({"model_type": "gpt2", "n_embd": 6, "eps": 1e-5,
        "name": "tiny", "tie": true, "nothing": null})";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

  // The error message of f(), which must throw sdk::Error.
  template <typename F>
  std::string error_of(F f) {
    try {
      f();
    } catch (const sdk::Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }

  fs::path dir_;
};

TEST_F(HfFolderTest, ReadsConfigAndAnySliceOfASingleFile) {
  const std::vector<float> w = iota(4 * 6), b = iota(6);
  write_safetensors(dir_ / "model.safetensors", {{"w", "F32", {4, 6}, w}, {"b", "F32", {6}, b}});
  auto f = HfFolder::open(dir());
  EXPECT_EQ(f->config().integer("n_embd"), 6);
  EXPECT_EQ(f->config().string("model_type"), "gpt2");
  EXPECT_DOUBLE_EQ(f->config().number("eps"), 1e-5);
  EXPECT_TRUE(f->config().boolean("tie"));
  EXPECT_EQ(f->config().integer("missing", 7), 7);
  EXPECT_EQ(f->config().integer("nothing", 3), 3);  // null reads as absent
  EXPECT_NE(error_of([&] { f->config().integer("name"); }).find("\"name\" must be an integer"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { f->config().integer("n_layer"); }).find("config.json has no \"n_layer\""),
      std::string::npos);

  const HfTensor& t = f->tensor("w", {4, 6});
  for (int64_t offset : {0, 1, 5, 13}) {
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, 24 - offset}) {
      std::vector<float> out(static_cast<size_t>(count), -99.0f);
      f->read(t, offset, count, out.data());
      for (int64_t k = 0; k < count; ++k) EXPECT_EQ(out[k], w[offset + k]) << offset << " " << k;
    }
  }
  EXPECT_NE(error_of([&] {
              float x[2];
              f->read(t, 23, 2, x);
            }).find("[23, 25)"),
            std::string::npos);
}

TEST_F(HfFolderTest, TransposedSlicesReadTheColumnBand) {
  // Stored (in 5, out 7) as Conv1D keeps it; read as (7, 5).
  const int64_t R = 5, K = 7;
  const std::vector<float> w = iota(R * K);
  write_safetensors(dir_ / "model.safetensors", {{"c", "F32", {R, K}, w}});
  auto f = HfFolder::open(dir());
  const HfTensor& t = f->tensor("c", {R, K});
  for (int64_t offset = 0; offset < R * K; offset += 3) {
    for (int64_t count : {int64_t{1}, int64_t{4}, int64_t{11}, R * K - offset}) {
      if (offset + count > R * K) continue;
      std::vector<float> out(static_cast<size_t>(count));
      f->read_transposed(t, offset, count, out.data());
      for (int64_t k = 0; k < count; ++k) {
        const int64_t i = (offset + k) / R,
                      j = (offset + k) % R;  // transpose (i, j) = stored (j, i)
        EXPECT_EQ(out[k], w[j * K + i]) << "offset " << offset << " count " << count;
      }
    }
  }
}

TEST_F(HfFolderTest, SixteenBitWeightsReadAsFloat) {
  // Values exact in both 16-bit formats.
  const std::vector<float> v = {0.5f, -1.25f, 3.0f, 0.0f, -0.0078125f, 96.0f};
  write_safetensors(dir_ / "model.safetensors",
                    {{"h", "F16", {2, 3}, v}, {"g", "BF16", {2, 3}, v}});
  auto f = HfFolder::open(dir());
  for (const char* name : {"h", "g"}) {
    const HfTensor& t = f->tensor(name, {2, 3});
    std::vector<float> out(4);
    f->read(t, 1, 4, out.data());
    for (int k = 0; k < 4; ++k) EXPECT_EQ(out[k], v[1 + k]) << name;
    std::vector<float> tr(6);
    f->read_transposed(t, 0, 6, tr.data());
    EXPECT_EQ(tr, (std::vector<float>{0.5f, 0.0f, -1.25f, -0.0078125f, 3.0f, 96.0f})) << name;
  }
  // A value bf16 rounds: read back as bf16 rounded it.
  write_safetensors(dir_ / "model.safetensors", {{"g", "BF16", {1}, {0.1f}}});
  auto g = HfFolder::open(dir());
  float x = 0;
  g->read(g->tensor("g", {1}), 0, 1, &x);
  EXPECT_EQ(x, sdk::bf16_to_float(sdk::float_to_bf16(0.1f)));
}

TEST_F(HfFolderTest, ShardedFolderFollowsTheIndex) {
  write_safetensors(dir_ / "model-00001-of-00002.safetensors", {{"a", "F32", {3}, iota(3)}});
  write_safetensors(dir_ / "model-00002-of-00002.safetensors", {{"b", "BF16", {2, 2}, iota(4)}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 20}, "weight_map": {
             "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
  auto f = HfFolder::open(dir());
  EXPECT_EQ(f->files().size(), 2u);
  EXPECT_EQ(f->tensor("a", {3}).file, dir() + "/model-00001-of-00002.safetensors");
  std::vector<float> out(4);
  f->read(f->tensor("b", {2, 2}), 0, 4, out.data());
  EXPECT_EQ(out, iota(4));
  const std::string missing = error_of([&] { f->tensor("c", {1}); });
  EXPECT_NE(missing.find("tensor c is missing from " + dir() + "/model.safetensors.index.json"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("model-00001-of-00002.safetensors model-00002-of-00002.safetensors"),
            std::string::npos)
      << missing;

  // The index names a shard that is not there.
  fs::remove(dir_ / "model-00002-of-00002.safetensors");
  const std::string gone = error_of([&] { HfFolder::open(dir()); });
  EXPECT_NE(gone.find("lists model-00002-of-00002.safetensors, which is not in"), std::string::npos)
      << gone;
}

TEST_F(HfFolderTest, MissingConfigJsonNamesTheFolder) {
  write_safetensors(dir_ / "model.safetensors", {{"a", "F32", {1}, {1.0f}}});
  fs::remove(dir_ / "config.json");
  const std::string m = error_of([&] { HfFolder::open(dir()); });
  EXPECT_NE(m.find("from_pretrained folder " + dir() + " has no config.json"), std::string::npos)
      << m;
  EXPECT_NE(error_of([&] { HfFolder::open(dir() + "/nope"); }).find("does not exist"),
            std::string::npos);
}

TEST_F(HfFolderTest, NoWeightsIsAnError) {
  const std::string m = error_of([&] { HfFolder::open(dir()); });
  EXPECT_NE(m.find("has neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos)
      << m;
}

TEST_F(HfFolderTest, TruncatedFileNamesTheFileAndTensor) {
  write_safetensors(dir_ / "model.safetensors",
                    {{"first", "F32", {4}, iota(4)}, {"last", "F32", {8}, iota(8)}});
  const fs::path path = dir_ / "model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 5);
  const std::string m = error_of([&] { HfFolder::open(dir()); });
  EXPECT_NE(m.find(path.string() + " is "), std::string::npos) << m;
  EXPECT_NE(m.find("tensor last ends at byte"), std::string::npos) << m;
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  // Cut into the header: still the file, and "truncated".
  fs::resize_file(path, 20);
  const std::string h = error_of([&] { HfFolder::open(dir()); });
  EXPECT_NE(h.find(path.string()), std::string::npos) << h;
  EXPECT_NE(h.find("truncated"), std::string::npos) << h;
}

TEST_F(HfFolderTest, MissingTensorWrongShapeAndUnknownDtypeAreNamed) {
  write_safetensors(dir_ / "model.safetensors",
                    {{"w", "F32", {4, 6}, iota(24)}, {"q", "I8", {2}, {1, 2}}});
  auto f = HfFolder::open(dir());
  const std::string file = dir() + "/model.safetensors";
  const std::string missing = error_of([&] { f->tensor("transformer.wte.weight", {4, 6}); });
  EXPECT_NE(missing.find("tensor transformer.wte.weight is missing from " + file),
            std::string::npos)
      << missing;
  const std::string shape = error_of([&] { f->tensor("w", {6, 4}); });
  EXPECT_NE(shape.find("tensor w in " + file +
                       " has shape [4, 6] but config.json's model needs "
                       "[6, 4]"),
            std::string::npos)
      << shape;
  const std::string dtype = error_of([&] { f->tensor("q", {2}); });
  EXPECT_NE(dtype.find("tensor q in " + file + " has dtype I8: dscore reads F32, BF16 and F16"),
            std::string::npos)
      << dtype;
}

TEST_F(HfFolderTest, ExportConfigKeepsTheOriginalKeysAndSetsTheModelsValues) {
  const std::string text =
      write_config_json(R"({"model_type": "gpt2", "n_embd": 4, "bos_token_id": 7})",
                        {{"n_embd", "64"},
                         {"architectures", "[\"GPT2LMHeadModel\"]"},
                         {"torch_dtype", json_string("float32")}});
  HfConfig c(text, "out/config.json");
  EXPECT_EQ(c.integer("n_embd"), 64);
  EXPECT_EQ(c.integer("bos_token_id"), 7);
  EXPECT_EQ(c.string("torch_dtype"), "float32");
  EXPECT_LT(text.find("\"model_type\""), text.find("\"architectures\""));  // old keys first
  EXPECT_NE(error_of([] { HfConfig("{", "x.json"); }).find("x.json is not valid JSON"),
            std::string::npos);
}

}  // namespace
}  // namespace dscore::hf
