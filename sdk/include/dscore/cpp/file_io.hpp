// Optional header-only helpers for plugins that write files (monitors,
// swappers): the dscore_status for an errno, little-endian integers, and the
// reflected CRC-32 family (zlib's CRC-32, TFRecord's CRC-32C). Nothing here
// crosses the ABI.
#ifndef DSCORE_CPP_FILE_IO_HPP_
#define DSCORE_CPP_FILE_IO_HPP_

#include <dscore/plugin.h>

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace dscore::sdk {

// What a failed file operation's errno means to the host: no permission,
// no space (a full disk is RESOURCE_EXHAUSTED), or the storage went away.
inline dscore_status errno_status(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return DSCORE_PERMISSION_DENIED;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return DSCORE_RESOURCE_EXHAUSTED;
    default:
      return DSCORE_UNAVAILABLE;
  }
}

// A new file at `path` (never an existing one: O_EXCL), open for writing
// with stdio buffering, or nullptr with errno set; *step says which step
// failed ("create" or "open") for the caller's message.
inline std::FILE* create_new_file(const std::string& path, const char** step) {
  *step = "create";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  *step = "open";
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    const int err = errno;
    ::close(fd);
    errno = err;
  }
  return file;
}

// Append the low `bytes` bytes of v, least significant first.
inline void put_le(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// A reflected CRC-32 with polynomial `Poly` (bit-reversed form), initial and
// final XOR 0xFFFFFFFF, continuing `crc` (0 to start): Poly 0xEDB88320 is
// zlib's CRC-32, 0x82F63B78 is CRC-32C (Castagnoli, TFRecord's).
template <uint32_t Poly>
uint32_t crc32_reflected(std::string_view data, uint32_t crc = 0) {
  static constexpr std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? Poly : 0u);
      table[i] = c;
    }
    return table;
  }();
  crc ^= 0xFFFFFFFFu;
  for (unsigned char c : data) crc = kTable[(crc ^ c) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_FILE_IO_HPP_
