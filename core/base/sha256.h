// SHA-256 (FIPS 180-4), for naming the exact bytes of a file dscore loads
// code from (plugin libraries: the run's log, `dscore plugins list --json`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace dscore {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  std::string hex_digest();  // 64 lowercase hex digits; ends the computation

 private:
  void compress(const uint8_t* block);

  uint32_t state_[8];
  uint8_t block_[64];
  size_t block_used_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view data);

// The file's digest, read in pieces; an error names the file.
Result<std::string> sha256_of_file(const std::string& path);

}  // namespace dscore
