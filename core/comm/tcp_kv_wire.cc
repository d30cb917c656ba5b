// The TCP key-value store's frames and bounded socket I/O (tcp_kv_wire.h).
#include "core/comm/tcp_kv_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dscore::comm::tcp_kv {

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void put_u32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

void put_u64(std::string* out, uint64_t v) {
  put_u32(out, static_cast<uint32_t>(v >> 32));
  put_u32(out, static_cast<uint32_t>(v));
}

void put_str(std::string* out, std::string_view s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

std::string frame(std::string_view payload) {
  std::string out;
  out.reserve(4 + payload.size());
  put_u32(&out, static_cast<uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

bool Reader::u8(uint8_t* v) {
  if (data_.size() - pos_ < 1) return false;
  *v = static_cast<uint8_t>(data_[pos_++]);
  return true;
}

bool Reader::u32(uint32_t* v) {
  if (data_.size() - pos_ < 4) return false;
  uint32_t x = 0;
  for (int i = 0; i < 4; ++i) x = (x << 8) | static_cast<uint8_t>(data_[pos_++]);
  *v = x;
  return true;
}

bool Reader::u64(uint64_t* v) {
  uint32_t hi = 0, lo = 0;
  if (!u32(&hi) || !u32(&lo)) return false;
  *v = (static_cast<uint64_t>(hi) << 32) | lo;
  return true;
}

bool Reader::str(std::string* s) {
  uint32_t n = 0;
  if (!u32(&n) || data_.size() - pos_ < n) return false;
  s->assign(data_.substr(pos_, n));
  pos_ += n;
  return true;
}

std::string reply(dscore_status code, std::string_view bytes) {
  std::string out(1, static_cast<char>(code));
  out.append(bytes);
  return out;
}

namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
Status wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    int timeout = -1;
    if (deadline != Clock::time_point::max()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Status(DSCORE_DEADLINE_EXCEEDED, "timed out");
      timeout = static_cast<int>(std::min<int64_t>(left, 1 << 30));
    }
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, timeout);
    if (n > 0) return Status::Ok();  // ready, or an error the next call reports
    if (n < 0 && errno != EINTR)
      return Status(DSCORE_UNAVAILABLE, std::string("poll: ") + std::strerror(errno));
  }
}

}  // namespace

Status send_all(int fd, std::string_view bytes, Clock::time_point deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    DSCORE_RETURN_IF_ERROR(wait_ready(fd, POLLOUT, deadline));
    const ssize_t n =
        ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status(DSCORE_UNAVAILABLE, std::string("the connection failed while sending (") +
                                            std::strerror(errno) + ")");
    }
  }
  return Status::Ok();
}

namespace {

Status recv_exact(int fd, char* out, size_t size, Clock::time_point deadline) {
  size_t done = 0;
  while (done < size) {
    DSCORE_RETURN_IF_ERROR(wait_ready(fd, POLLIN, deadline));
    const ssize_t n = ::recv(fd, out + done, size - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      return Status(DSCORE_UNAVAILABLE, "the peer closed the connection");
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status(DSCORE_UNAVAILABLE,
                    std::string("the connection failed (") + std::strerror(errno) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> recv_frame(int fd, Clock::time_point deadline) {
  char header[4];
  DSCORE_RETURN_IF_ERROR(recv_exact(fd, header, 4, deadline));
  uint32_t size = 0;
  Reader(std::string_view(header, 4)).u32(&size);
  if (size > kMaxFrame)
    return Status(DSCORE_UNAVAILABLE, "the peer sent a frame of " + std::to_string(size) +
                                          " bytes: it does not speak the store's protocol");
  std::string payload(size, '\0');
  DSCORE_RETURN_IF_ERROR(recv_exact(fd, payload.data(), size, deadline));
  return payload;
}

std::string address_text(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace dscore::comm::tcp_kv
