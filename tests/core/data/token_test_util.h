// Test helpers for the token data sources: a scratch directory, writers for
// text files and llm.c shards (with knobs to break them), and a minimal
// token model declaring one int32 input "tokens" of shape [T+1].
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/data/token_file.h"
#include "core/model/model.h"

// The whole text is printed when the piece is missing.
#define EXPECT_CONTAINS(text, piece)                          \
  EXPECT_NE(std::string(text).find(piece), std::string::npos) \
      << "missing \"" << (piece) << "\" in: " << (text)

namespace dscore::testing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "dscore_data_XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// What write_shard puts in the header; the defaults make a valid shard.
struct ShardHeader {
  int32_t magic = data::kLlmcMagic;
  int32_t version = data::kLlmcVersion;
  int64_t count = -1;      // -1: tokens.size()
  int64_t drop_bytes = 0;  // bytes cut off the end (truncation)
  int64_t extra_bytes = 0;
};

inline void write_shard(const std::string& path, const std::vector<uint16_t>& tokens,
                        ShardHeader h = {}) {
  std::string bytes(static_cast<size_t>(data::kLlmcHeaderBytes), '\0');
  const int32_t header[3] = {
      h.magic, h.version,
      static_cast<int32_t>(h.count < 0 ? static_cast<int64_t>(tokens.size()) : h.count)};
  std::memcpy(bytes.data(), header, sizeof header);  // little-endian host, as llm.c
  for (uint16_t t : tokens) {
    bytes.push_back(static_cast<char>(t & 0xff));
    bytes.push_back(static_cast<char>(t >> 8));
  }
  bytes.resize(bytes.size() - static_cast<size_t>(h.drop_bytes));
  bytes.append(static_cast<size_t>(h.extra_bytes), '\x07');
  write_bytes(path, bytes);
}

// A token model with block size T: one input "tokens" (int32, [T+1]).
// Only its description matters to the data sources.
class TokenModel : public Model {
 public:
  explicit TokenModel(int64_t block_size, const char* input_name = "tokens",
                      dscore_dtype dtype = DSCORE_DTYPE_I32) {
    shape_[0] = block_size + 1;
    input_.struct_size = sizeof input_;
    input_.name = input_name;
    input_.dtype = dtype;
    input_.ndim = 1;
    input_.shape = shape_;
    inputs_[0] = &input_;
    description_.struct_size = sizeof description_;
    description_.input_count = 1;
    description_.inputs = inputs_;
  }
  std::string display_name() const override { return "model 'token_test'"; }
  const dscore_model_description& description() const override { return description_; }
  Status init_param(size_t, int64_t, int64_t, float*) const override { return Status::Ok(); }
  Status forward_backward(const dscore_batch&, const dscore_model_hooks&, double,
                          double*) override {
    return Status::Ok();
  }

 private:
  int64_t shape_[1] = {};
  dscore_model_input input_{};
  const dscore_model_input* inputs_[1] = {};
  dscore_model_description description_{};
};

}  // namespace dscore::testing
