// Reading a zip archive as torch.save writes one (PyTorch's zip format):
// entries stored without compression, found through the central directory,
// with zip64 records for large archives. Each entry's CRC-32 is checked
// as it is read (read, stream).
// Compressed entries, encrypted ones and multi-disk archives are refused
// by name; nothing here trusts a length before checking it against the
// file's size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace dscore::checkpoint {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // of the stored bytes in the file
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

class ZipArchive {
 public:
  // NOT_FOUND for a missing file; DATA_LOSS naming the file and what is
  // wrong for a truncated or malformed archive; UNIMPLEMENTED for
  // compressed or encrypted entries.
  static Result<ZipArchive> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;  // nullptr when absent

  // The whole entry, its CRC-32 checked (for small entries: the pickle).
  Result<std::string> read(const ZipEntry& entry) const;
  // The whole entry in chunks to `sink`, its CRC-32 checked at the end.
  Status stream(const ZipEntry& entry,
                const std::function<Status(const char* data, size_t bytes)>& sink) const;

 private:
  std::string path_;
  std::vector<ZipEntry> entries_;
};

// `text` for a one-line message: bytes outside printable ASCII as \xNN,
// cut to 200 characters (names read from a damaged file can hold anything).
std::string printable(std::string_view text);

// CRC-32 (IEEE, as zip uses) of `bytes`, continuing from `crc`.
uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);

}  // namespace dscore::checkpoint
