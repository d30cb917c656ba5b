// The W&B transaction log (`run-<id>.wandb`), the file an offline wandb run
// leaves for `wandb sync`: a 7-byte header (":W&B", magic 0xBEE1, version 0)
// then LevelDB-log-style 32 KiB blocks of records, each record framed as
// {crc32 of (type byte + data), uint16 length, uint8 type FULL/FIRST/MIDDLE/
// LAST} (little-endian; zlib's CRC-32, unmasked). Laid out byte for byte as
// wandb's own writer (wandb/sdk/internal/datastore.py) lays it out.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace dscore::wandb {

constexpr size_t kBlockSize = 32768;
constexpr size_t kRecordHeaderSize = 7;  // crc32 (4) + length (2) + type (1)
enum ChunkType : uint8_t { kFull = 1, kFirst = 2, kMiddle = 3, kLast = 4 };

// zlib's CRC-32 (IEEE, reflected polynomial 0xEDB88320), continuing `crc`.
uint32_t crc32(std::string_view data, uint32_t crc = 0);

// The 7-byte file header.
std::string file_header();

// The bytes that append `payload` (one serialized Record) at file offset
// `offset` (header included): zero padding when fewer than 7 bytes are left
// in the block, then one FULL chunk or FIRST/MIDDLE.../LAST chunks.
std::string frame_record(std::string_view payload, uint64_t offset);

// A transaction log open for writing. Errors throw sdk::Error naming the file.
class RunLog {
 public:
  // Creates `path` (it must not exist) and writes the file header.
  explicit RunLog(std::string path);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  void append(std::string_view record);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void put(std::string_view bytes);
  [[noreturn]] void fail(const char* what) const;
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t offset_ = 0;  // bytes written so far, header included
};

}  // namespace dscore::wandb
