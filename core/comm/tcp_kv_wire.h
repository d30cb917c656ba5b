// The TCP key-value store's wire format and socket helpers (tcp_kv.h is the
// store). Every message is a frame: a 4-byte big-endian payload length, then
// the payload. A request payload starts with its op byte; a reply payload
// is one status byte (a dscore_status) and the bytes that go with it.
//   HELLO  magic "DSKV", u32 version, i32 rank, i32 world, u32 token length,
//          token                                              -> OK "DSKV"
//   SET    u32 key length, key, value (the rest)             -> OK
//   GET    i64 timeout_ms (< 0: none), u32 key length, key   -> OK value |
//                                        DEADLINE_EXCEEDED / UNAVAILABLE text
//   BYE    (a clean close; no reply)
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace dscore::comm::tcp_kv {

using Clock = std::chrono::steady_clock;

enum Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kBye = 4 };
constexpr std::string_view kMagic = "DSKV";
constexpr uint32_t kVersion = 2;
constexpr size_t kMaxKey = 64 << 10;
constexpr size_t kMaxFrame = (256u << 20) + kMaxKey + 64;  // values up to 256 MiB

// An owned file descriptor; closes on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// Appends big-endian integers and length-prefixed strings to a payload.
void put_u32(std::string* out, uint32_t v);
void put_u64(std::string* out, uint64_t v);
void put_str(std::string* out, std::string_view s);
// A frame around `payload`.
std::string frame(std::string_view payload);

// Reads from a payload; every getter fails (returns false) past its end.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool u8(uint8_t* v);
  bool u32(uint32_t* v);
  bool u64(uint64_t* v);
  bool str(std::string* s);  // u32 length + bytes
  std::string_view rest() {
    std::string_view r = data_.substr(pos_);
    pos_ = data_.size();
    return r;
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

// A reply payload: a status byte and its bytes.
std::string reply(dscore_status code, std::string_view bytes);

// Blocking socket I/O bounded by `deadline` (Clock::time_point::max(): none).
// Errors: DEADLINE_EXCEEDED when the deadline passes, UNAVAILABLE when the
// peer closed or reset the connection (the message says which).
Status send_all(int fd, std::string_view bytes, Clock::time_point deadline);
Result<std::string> recv_frame(int fd, Clock::time_point deadline);

// "host:port", with brackets around an IPv6 literal.
std::string address_text(const std::string& host, int port);

}  // namespace dscore::comm::tcp_kv
