// The safetensors format (what HuggingFace and the `safetensors` package
// read): 8 bytes of little-endian header length, a JSON header mapping each
// tensor name to {dtype, shape, data_offsets} plus an optional
// "__metadata__" string map, padded with spaces to a multiple of 8, then
// the tensors' bytes back to back.
//
// dscore adds one metadata key, "dscore.checksums": a JSON object of
// tensor name -> "xxh3:<hex>". The writer declares every tensor first,
// writes the header with placeholder checksums, streams the data while
// hashing it, and patches the header (same length) before commit — one pass
// over the data. Files are written durably (durable_file.h).
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/checkpoint/durable_file.h"

namespace dscore::checkpoint {

inline constexpr const char* kChecksumsKey = "dscore.checksums";

// "F32", "BF16", ...; nullptr for a dtype safetensors has no name for.
const char* safetensors_dtype_name(dscore_dtype dtype);
dscore_dtype dtype_from_safetensors(std::string_view name);  // INVALID when unknown

struct TensorSpec {
  std::string name;
  dscore_dtype dtype = DSCORE_DTYPE_F32;
  std::vector<int64_t> shape;
  uint64_t bytes() const;
};

class SafetensorsWriter {
 public:
  static Result<SafetensorsWriter> create(const std::string& path, std::vector<TensorSpec> tensors,
                                          const std::map<std::string, std::string>& metadata);
  // The next bytes of the data section, in declaration order; a tensor may
  // come in several pieces.
  Status append(const void* data, size_t bytes);
  // Every declared byte must have been appended.
  Status commit();
  // After commit: the checksums, in declaration order.
  const std::vector<uint64_t>& checksums() const { return checksums_; }
  const std::string& path() const { return file_.path(); }

 private:
  SafetensorsWriter(DurableFile file, std::vector<TensorSpec> tensors,
                    std::map<std::string, std::string> metadata, uint64_t header_bytes);
  struct Hasher;

  DurableFile file_;
  std::vector<TensorSpec> tensors_;
  std::map<std::string, std::string> metadata_;
  uint64_t header_bytes_ = 0;  // the 8-byte length and the padded JSON
  size_t current_ = 0;         // tensor being appended
  uint64_t current_left_ = 0;  // its bytes still to come
  std::shared_ptr<Hasher> hasher_;
  std::vector<uint64_t> checksums_;
};

// One tensor to write: from memory (`data`), or streamed from `source`,
// which fills dst with the tensor's bytes [offset, offset + bytes) (state
// kept on NVMe; write_safetensors asks for pieces of a bounded size).
struct TensorData {
  TensorSpec spec;
  const void* data = nullptr;
  std::function<Status(uint64_t offset, void* dst, size_t bytes)> source = nullptr;
};
// Write a whole file. `midway` (optional) runs once after the first tensor
// is on disk (the crash tests' hook).
Status write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                         const std::map<std::string, std::string>& metadata,
                         const std::function<void()>& midway = {});

struct TensorInfo {
  std::string name;
  dscore_dtype dtype = DSCORE_DTYPE_INVALID;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute file offset of the first byte
  uint64_t bytes = 0;
  std::optional<uint64_t> checksum;
  int64_t numel() const;
};

class SafetensorsReader {
 public:
  // Reads and checks the header: every tensor inside the file (else the
  // file is reported truncated), sizes consistent with dtype and shape.
  static Result<SafetensorsReader> open(const std::string& path);

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;

  // Bytes [offset, offset + bytes) of `tensor` (offset relative to it).
  Status read(const TensorInfo& tensor, uint64_t offset, uint64_t bytes, void* dst) const;
  // The whole tensor into dst, checked against its checksum (when it has one).
  Status read_verified(const TensorInfo& tensor, void* dst) const;
  // Read the tensor through a small buffer and check its checksum.
  Status verify(const TensorInfo& tensor) const;
  // DATA_LOSS naming the file and tensor, when `computed` differs from the stored checksum.
  Status check(const TensorInfo& tensor, uint64_t computed) const;

 private:
  std::string path_;
  std::shared_ptr<const int> fd_;
  uint64_t file_size_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace dscore::checkpoint
