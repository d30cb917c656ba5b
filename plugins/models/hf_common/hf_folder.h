// A Hugging Face model folder as a model plugin reads it (the folder that
// transformers' save_pretrained writes): config.json, and the weights in
// model.safetensors or in the shards model.safetensors.index.json lists.
// Opening reads config.json and every safetensors header (never tensor
// data); read() then fetches any slice of a tensor as fp32 with pread, so a
// rank that owns a shard of a parameter reads only that shard's bytes.
// Errors are sdk::Error (the model adapter turns them into a status and a
// message) naming the folder, file and tensor. Thread-safe after open().
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dscore::hf {

// One tensor of a safetensors file, as its header declares it.
struct HfTensor {
  std::string name;
  std::string file;   // the safetensors file's path
  std::string dtype;  // as written: "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute file offset of the first byte
  uint64_t bytes = 0;
  int64_t numel() const;
};

// "[768, 2304]"
std::string shape_text(const std::vector<int64_t>& shape);

class HfConfig;  // hf_config.h

class HfFolder {
 public:
  // Reads DIR/config.json and the weights' headers: a missing config.json,
  // missing weights, a corrupt header or a tensor past the end of its file
  // (a truncated download) is an error naming the folder or file.
  static std::shared_ptr<const HfFolder> open(const std::string& dir);
  ~HfFolder();
  HfFolder(const HfFolder&) = delete;
  HfFolder& operator=(const HfFolder&) = delete;

  const std::string& dir() const { return dir_; }
  const HfConfig& config() const { return *config_; }
  // The weight files, in the order they were opened.
  std::vector<std::string> files() const;

  // The tensor `name`, or nullptr.
  const HfTensor* find(const std::string& name) const;
  // The tensor `name`, which must exist, hold F32, BF16 or F16, and have
  // `shape`: else an error naming the tensor, the file(s) looked in, and
  // the shapes expected and found.
  const HfTensor& tensor(const std::string& name, const std::vector<int64_t>& shape) const;

  // Elements [offset, offset + count) of `t` (row-major) as fp32 into out.
  void read(const HfTensor& t, int64_t offset, int64_t count, float* out) const;
  // Elements [offset, offset + count) of the 2-D transpose of `t` (a
  // (rows, cols) tensor read as (cols, rows), row-major) as fp32: what
  // nn.Linear's (out, in) layout is of a Conv1D weight stored (in, out).
  // Reads only the column band the slice covers.
  void read_transposed(const HfTensor& t, int64_t offset, int64_t count, float* out) const;

 private:
  HfFolder() = default;
  struct File;
  void open_file(const std::string& path);
  const File& file_of(const HfTensor& t) const;
  // Bytes [offset, offset + bytes) of the file, absolute offsets.
  void pread_exact(const File& f, uint64_t offset, uint64_t bytes, void* dst) const;

  std::string dir_;
  std::unique_ptr<HfConfig> config_;
  std::string index_path_;  // model.safetensors.index.json when sharded, else ""
  std::vector<std::unique_ptr<File>> files_;
  std::map<std::string, HfTensor> tensors_;
};

}  // namespace dscore::hf
