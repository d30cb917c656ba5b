// The TCP key-value store's client side (tcp_kv.h).
#include "core/comm/tcp_kv.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

namespace dscore::comm {

using tcp_kv::Clock;
using tcp_kv::Fd;

namespace {

constexpr auto kGrace = std::chrono::seconds(10);  // past a GET's own deadline
constexpr size_t kMaxValue = 256u << 20;

// `ms` from now; no deadline for < 0 or past a century (no overflow).
Clock::time_point after(int64_t ms) {
  constexpr int64_t kCentury = int64_t{100} * 365 * 24 * 3600 * 1000;
  return ms < 0 || ms > kCentury ? Clock::time_point::max()
                                 : Clock::now() + std::chrono::milliseconds(ms);
}

// One non-blocking connect to `a` bounded by `deadline`; errno-style text
// on failure.
Result<Fd> connect_one(const addrinfo& a, Clock::time_point deadline) {
  Fd fd(::socket(a.ai_family, a.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a.ai_protocol));
  if (!fd.valid()) return Status(DSCORE_UNAVAILABLE, std::strerror(errno));
  if (::connect(fd.get(), a.ai_addr, a.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return Status(DSCORE_UNAVAILABLE, std::strerror(errno));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::min(deadline, Clock::now() + std::chrono::seconds(5)) - Clock::now())
                          .count();
    pollfd p{fd.get(), POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0)
      return Status(DSCORE_UNAVAILABLE, "the connection attempt timed out");
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Status(DSCORE_UNAVAILABLE, std::strerror(err));
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

std::string bye_frame() { return tcp_kv::frame(std::string(1, static_cast<char>(tcp_kv::kBye))); }

// Whether a TCP listener could bind 127.0.0.1:`port` now (0: any port; the
// port bound is returned).
Result<int> bind_loopback(int port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid())
    return Status(DSCORE_UNAVAILABLE, std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof a;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return Status(DSCORE_UNAVAILABLE, std::strerror(errno));
  return static_cast<int>(ntohs(a.sin_port));
}

// The first port of the kernel's ephemeral range (what a bind to port 0
// hands out), 32768 where it cannot be read.
int first_ephemeral_port() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0;
  return range >> first && first > 0 ? first : 32768;
}

}  // namespace

Result<std::shared_ptr<TcpKv>> TcpKv::create(const TcpKvOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    return invalid_argument("TcpKv: rank " + std::to_string(options.rank) + " of a world of " +
                            std::to_string(options.world_size));
  std::shared_ptr<TcpKv> kv(new TcpKv(options));
  if (options.rank == 0) {
    DSCORE_ASSIGN_OR_RETURN(kv->server_, tcp_kv::Server::start(options.host, options.port,
                                                               options.world_size, options.token));
    kv->options_.port = kv->server_->port();
  }
  DSCORE_ASSIGN_OR_RETURN(Fd fd, kv->connect(after(options.connect_timeout_ms), true));
  kv->give_back(std::move(fd));
  return kv;
}

TcpKv::~TcpKv() {
  const std::string bye = bye_frame();
  for (Fd& fd : idle_)
    (void)tcp_kv::send_all(fd.get(), bye, Clock::now() + std::chrono::seconds(1));
  idle_.clear();
  server_.reset();
}

Result<Fd> TcpKv::connect(Clock::time_point deadline, bool retry_refused) {
  const std::string where = "the job's key-value store at MASTER_ADDR:MASTER_PORT = " + address();
  std::string hello(1, static_cast<char>(tcp_kv::kHello));
  hello.append(tcp_kv::kMagic);
  tcp_kv::put_u32(&hello, tcp_kv::kVersion);
  tcp_kv::put_u32(&hello, static_cast<uint32_t>(options_.rank));
  tcp_kv::put_u32(&hello, static_cast<uint32_t>(options_.world_size));
  tcp_kv::put_str(&hello, options_.token);
  const std::string port = std::to_string(options_.port);
  std::string last_error;
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found);
    if (rc != 0) last_error = std::string("cannot resolve the host: ") + gai_strerror(rc);
    for (addrinfo* a = rc == 0 ? found : nullptr; a != nullptr; a = a->ai_next) {
      Result<Fd> fd = connect_one(*a, deadline);
      if (!fd.ok()) {
        last_error = fd.status().message();
        continue;
      }
      // The handshake: a reply proves dscore's store listens there.
      const auto answer_by = std::min(deadline, Clock::now() + std::chrono::seconds(10));
      Status sent = tcp_kv::send_all(fd->get(), tcp_kv::frame(hello), answer_by);
      Result<std::string> answer =
          sent.ok() ? tcp_kv::recv_frame(fd->get(), answer_by) : Result<std::string>(sent);
      if (!answer.ok()) {
        last_error = "connected, but no dscore key-value store answered (" +
                     answer.status().message() + "); is another program using that port?";
        continue;
      }
      tcp_kv::Reader r(*answer);
      uint8_t code = 0;
      r.u8(&code);
      const std::string_view text = r.rest();
      if (code != DSCORE_OK) {
        ::freeaddrinfo(found);
        return Status(
            static_cast<dscore_status>(code),
            where + " refused rank " + std::to_string(options_.rank) + ": " + std::string(text));
      }
      if (text != tcp_kv::kMagic) {
        last_error = "connected, but what answered is not a dscore key-value store";
        continue;
      }
      ::freeaddrinfo(found);
      return std::move(*fd);
    }
    if (found != nullptr) ::freeaddrinfo(found);
    if (!retry_refused)
      return Status(DSCORE_UNAVAILABLE,
                    where + " (served by rank 0) cannot be reached any more: " + last_error +
                        ". Rank 0 has exited or failed; see its log");
    if (Clock::now() >= deadline)
      return Status(
          DSCORE_UNAVAILABLE,
          "rank " + std::to_string(options_.rank) + " could not reach " + where + " within " +
              std::to_string(options_.connect_timeout_ms) + " ms (" + last_error +
              "). Rank 0 serves the store there: check that rank 0 is running, that MASTER_ADDR "
              "names rank 0's host as this host reaches it, and that every rank of the job has "
              "the same MASTER_PORT");
    std::this_thread::sleep_for(
        std::min<Clock::duration>(backoff, std::max<Clock::duration>(deadline - Clock::now(), {})));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

Result<Fd> TcpKv::take_connection() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      Fd fd = std::move(idle_.back());
      idle_.pop_back();
      return fd;
    }
  }
  // The store answered before: refused now means rank 0 is gone.
  return connect(after(options_.connect_timeout_ms), false);
}

void TcpKv::give_back(Fd fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(fd));
}

Status TcpKv::lost(const Status& io, const std::string& what) const {
  if (io.code() == DSCORE_DEADLINE_EXCEEDED)
    return Status(DSCORE_UNAVAILABLE, "the job's key-value store at " + address() +
                                          " (served by rank 0) did not answer " + what +
                                          " in time: rank 0 is stuck or overloaded");
  return Status(DSCORE_UNAVAILABLE, "the job's key-value store at " + address() +
                                        " (served by rank 0) went away during " + what + " (" +
                                        io.message() + "): rank 0 exited or failed; see its log");
}

Result<std::pair<dscore_status, std::string>> TcpKv::exchange(const std::string& request,
                                                              Clock::time_point deadline,
                                                              const std::string& what) {
  DSCORE_ASSIGN_OR_RETURN(Fd fd, take_connection());
  Status sent = tcp_kv::send_all(fd.get(), tcp_kv::frame(request), deadline);
  Result<std::string> answer =
      sent.ok() ? tcp_kv::recv_frame(fd.get(), deadline) : Result<std::string>(sent);
  if (!answer.ok()) {
    // A late reply would pair with the next request: this connection is done.
    (void)tcp_kv::send_all(fd.get(), bye_frame(), Clock::now() + std::chrono::milliseconds(100));
    return lost(answer.status(), what);
  }
  give_back(std::move(fd));
  tcp_kv::Reader r(*answer);
  uint8_t code = 0;
  if (!r.u8(&code)) return lost(Status(DSCORE_UNAVAILABLE, "an empty reply"), what);
  return std::make_pair(static_cast<dscore_status>(code), std::string(r.rest()));
}

Status TcpKv::set(const std::string& key, std::string value) {
  if (key.size() > tcp_kv::kMaxKey || value.size() > kMaxValue)
    return invalid_argument("kv_set '" + key.substr(0, 100) + "': the store takes keys up to " +
                            std::to_string(tcp_kv::kMaxKey) + " bytes and values up to " +
                            std::to_string(kMaxValue) +
                            " bytes (this value: " + std::to_string(value.size()) + ")");
  std::string request(1, static_cast<char>(tcp_kv::kSet));
  tcp_kv::put_str(&request, key);
  request += value;
  DSCORE_ASSIGN_OR_RETURN(auto answer, exchange(request, after(options_.connect_timeout_ms),
                                                "the set of key '" + key + "'"));
  if (answer.first != DSCORE_OK) return Status(answer.first, answer.second);
  return Status::Ok();
}

Result<std::string> TcpKv::get(const std::string& key, int64_t timeout_ms) {
  if (key.size() > tcp_kv::kMaxKey)
    return invalid_argument("kv_get: a key of " + std::to_string(key.size()) +
                            " bytes; the store takes keys up to " +
                            std::to_string(tcp_kv::kMaxKey));
  std::string request(1, static_cast<char>(tcp_kv::kGet));
  tcp_kv::put_u64(&request, static_cast<uint64_t>(timeout_ms));
  tcp_kv::put_str(&request, key);
  Clock::time_point deadline = after(timeout_ms);
  if (deadline != Clock::time_point::max()) deadline += kGrace;
  DSCORE_ASSIGN_OR_RETURN(auto answer,
                          exchange(request, deadline, "the wait for key '" + key + "'"));
  switch (answer.first) {
    case DSCORE_OK:
      return std::move(answer.second);
    case DSCORE_DEADLINE_EXCEEDED:
      return Status(DSCORE_DEADLINE_EXCEEDED,
                    "key '" + key + "' was not published within " + std::to_string(timeout_ms) +
                        " ms in the job's key-value store at " + address() +
                        " (MASTER_ADDR:MASTER_PORT, served by rank 0); " + answer.second);
    case DSCORE_UNAVAILABLE:
      return Status(DSCORE_UNAVAILABLE, "key '" + key + "' cannot arrive through the job's " +
                                            "key-value store at " + address() + ": " +
                                            answer.second);
    default:
      return Status(answer.first, answer.second);
  }
}

Result<int> pick_free_port() {
  // Below the ephemeral range, so no bind to port 0 can take the port
  // before the job binds it. mpirun's own listeners start between this pick
  // and rank 0's store; one took the DeepSpeed check's port, picked the old
  // way, and the rank that connected to it waited on mpirun for good.
  constexpr int kLowest = 20000;
  const int below = first_ephemeral_port() - 16;  // room for MASTER_PORT + 1
  if (below - kLowest >= 1000) {
    std::mt19937 random{std::random_device{}()};
    std::uniform_int_distribution<int> port(kLowest, below - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      Result<int> bound = bind_loopback(port(random));
      if (bound.ok()) return bound;
    }
  }
  Result<int> any = bind_loopback(0);
  if (!any.ok())
    return Status(DSCORE_UNAVAILABLE,
                  "cannot find a free TCP port on 127.0.0.1: " + any.status().message());
  return any;
}

}  // namespace dscore::comm
