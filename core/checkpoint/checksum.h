// Tensor checksums: XXH3-64 (libxxhash), written as "xxh3:<16 hex digits>".
// Fast enough (tens of GB/s) that hashing while writing or reading a
// checkpoint costs a small part of the disk time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace dscore::checkpoint {

uint64_t checksum(const void* data, size_t bytes);
std::string format_checksum(uint64_t value);  // fixed width: always 21 characters
std::optional<uint64_t> parse_checksum(std::string_view text);

// Incremental form: update() over consecutive pieces equals checksum() of
// their concatenation.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;
  void update(const void* data, size_t bytes);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dscore::checkpoint
