#include "core/checkpoint/checksum.h"

#include <xxhash.h>

#include <cstdio>

namespace dscore::checkpoint {

struct ChecksumStream::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

uint64_t checksum(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

std::string format_checksum(uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "xxh3:%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::optional<uint64_t> parse_checksum(std::string_view text) {
  constexpr std::string_view kPrefix = "xxh3:";
  if (text.size() != kPrefix.size() + 16 || text.substr(0, kPrefix.size()) != kPrefix)
    return std::nullopt;
  uint64_t value = 0;
  for (char c : text.substr(kPrefix.size())) {
    int digit;
    if (c >= '0' && c <= '9')
      digit = c - '0';
    else if (c >= 'a' && c <= 'f')
      digit = c - 'a' + 10;
    else
      return std::nullopt;
    value = value << 4 | static_cast<uint64_t>(digit);
  }
  return value;
}

ChecksumStream::ChecksumStream() : state_(std::make_unique<State>()) {
  XXH3_64bits_reset(state_->xxh);
}
ChecksumStream::~ChecksumStream() = default;
void ChecksumStream::update(const void* data, size_t bytes) {
  XXH3_64bits_update(state_->xxh, data, bytes);
}
uint64_t ChecksumStream::digest() const { return XXH3_64bits_digest(state_->xxh); }

}  // namespace dscore::checkpoint
