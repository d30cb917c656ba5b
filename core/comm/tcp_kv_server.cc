// The TCP key-value store's server thread (tcp_kv_server.h).
#include "core/comm/tcp_kv_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "core/comm/tcp_kv_wire.h"

namespace dscore::comm::tcp_kv {
namespace {

struct Conn {
  Fd fd;
  std::string in;   // bytes received, not yet a whole frame
  std::string out;  // replies not yet sent
  int rank = -1;    // from its HELLO
  bool closing = false;
  bool said_bye = false;
};

struct Waiter {
  uint64_t conn;
  std::string key;
  Clock::time_point deadline;
};

}  // namespace

struct Server::State {
  Fd listener, wake;
  int port = 0;
  int world = 1;
  std::string token;  // "" = none required
  std::atomic<bool> stop{false};
  std::thread thread;

  // Touched by the server thread only.
  uint64_t next_id = 0;
  std::map<uint64_t, Conn> conns;
  std::map<std::string, std::string> values;
  std::list<Waiter> waiters;
  std::set<int> ranks_seen;
  std::map<int, std::string> failed;  // rank -> what happened

  void run();
  void accept_all();
  void read_from(uint64_t id, Conn& c);
  void handle(uint64_t id, Conn& c, std::string_view payload);
  void handle_get(uint64_t id, Conn& c, Reader& r);
  void drop(uint64_t id, Conn& c, bool failed_rank);
  void flush(uint64_t id, Conn& c);
  void expire_waiters();
  int poll_timeout() const;
  std::string ranks_text() const;
  std::string failed_text() const;
};

Result<std::unique_ptr<Server>> Server::start(const std::string& address, int port, int world_size,
                                              const std::string& token) {
  auto state = std::make_unique<State>();
  state->world = world_size;
  state->token = token;
  // A literal address is bound as given; a host name means every interface.
  in_addr v4{};
  in6_addr v6{};
  const bool literal_v4 = ::inet_pton(AF_INET, address.c_str(), &v4) == 1;
  const bool literal_v6 = !literal_v4 && ::inet_pton(AF_INET6, address.c_str(), &v6) == 1;
  // Every interface, as the ranks may reach this host by any of its names;
  // IPv6 with IPv4 mapped where the system has IPv6, else IPv4.
  int err = 0;
  for (int family : {AF_INET6, AF_INET}) {
    if ((literal_v4 && family == AF_INET6) || (literal_v6 && family == AF_INET)) continue;
    Fd fd(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      err = errno;
      continue;
    }
    const int one = 1, zero = 0;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (family == AF_INET6) {
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = literal_v6 ? v6 : in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      if (literal_v4)
        a.sin_addr = v4;
      else
        a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0 || ::listen(fd.get(), 1024) != 0) {
      err = errno;
      if (err == EADDRINUSE || err == EACCES) break;  // the same with IPv4
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    state->port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    state->listener = std::move(fd);
    break;
  }
  if (!state->listener.valid()) {
    std::string why = std::strerror(err);
    if (err == EADDRNOTAVAIL)
      why += ": MASTER_ADDR " + address + " is not an address of rank 0's host; set it to one";
    if (err == EADDRINUSE)
      why +=
          ": another program, or an earlier job still exiting, holds it; set MASTER_PORT to a "
          "free port, the same on every rank";
    return Status(DSCORE_UNAVAILABLE, "rank 0 cannot serve the job's key-value store on port " +
                                          std::to_string(port) + " (MASTER_PORT; the ranks " +
                                          "connect to " + address_text(address, port) +
                                          "): " + why);
  }
  state->wake = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!state->wake.valid())
    return Status(DSCORE_UNAVAILABLE, std::string("eventfd: ") + std::strerror(errno));
  State* s = state.get();
  state->thread = std::thread([s] { s->run(); });
  return std::unique_ptr<Server>(new Server(std::move(state)));
}

Server::Server(std::unique_ptr<State> state) : state_(std::move(state)) {}

Server::~Server() {
  state_->stop.store(true);
  const uint64_t one = 1;
  (void)!::write(state_->wake.get(), &one, sizeof one);
  state_->thread.join();
}

int Server::port() const { return state_->port; }

void Server::State::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stop.load()) {
    fds.assign({{wake.get(), POLLIN, 0}, {listener.get(), POLLIN, 0}});
    ids.clear();
    for (auto& [id, c] : conns) {
      fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      ids.push_back(id);
    }
    const int n = ::poll(fds.data(), fds.size(), poll_timeout());
    if (n < 0 && errno != EINTR) break;
    if (stop.load()) break;
    if (n > 0) {
      if (fds[1].revents & POLLIN) accept_all();
      for (size_t i = 0; i < ids.size(); ++i) {
        auto it = conns.find(ids[i]);
        if (it == conns.end() || it->second.closing) continue;
        if (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) read_from(ids[i], it->second);
      }
    }
    expire_waiters();
    for (auto it = conns.begin(); it != conns.end();) {
      if (!it->second.closing) flush(it->first, it->second);
      it = it->second.closing ? conns.erase(it) : std::next(it);
    }
  }
  conns.clear();  // closes every socket: the ranks still waiting see it
}

void Server::State::accept_all() {
  for (;;) {
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a connection that went away already
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conns[next_id++].fd = Fd(fd);
  }
}

void Server::State::read_from(uint64_t id, Conn& c) {
  char buffer[1 << 16];
  bool closed = false;  // the peer closed or reset: after its last frames
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    closed = !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    break;
  }
  size_t pos = 0;
  while (!c.closing && c.in.size() - pos >= 4) {
    uint32_t size = 0;
    Reader(std::string_view(c.in).substr(pos, 4)).u32(&size);
    if (size > kMaxFrame) return drop(id, c, false);  // not our protocol
    if (c.in.size() - pos - 4 < size) break;
    handle(id, c, std::string_view(c.in).substr(pos + 4, size));
    pos += 4 + size;
  }
  c.in.erase(0, pos);
  // Without a BYE first (drop checks), the rank failed.
  if (closed && !c.closing) drop(id, c, /*failed_rank=*/true);
}

void Server::State::handle(uint64_t id, Conn& c, std::string_view payload) {
  Reader r(payload);
  uint8_t op = 0;
  r.u8(&op);
  if (op == kBye) {
    c.said_bye = true;
    return drop(id, c, false);
  }
  if (c.rank < 0 && op != kHello) return drop(id, c, false);
  if (op == kHello) {
    std::string magic(kMagic.size(), '\0');
    uint32_t version = 0, rank = 0, world_size = 0;
    for (char& ch : magic) r.u8(reinterpret_cast<uint8_t*>(&ch));
    if (magic != kMagic || !r.u32(&version) || !r.u32(&rank) || !r.u32(&world_size))
      return drop(id, c, false);
    std::string error, token;
    const bool has_token = version == kVersion && r.str(&token);
    if (version == kVersion && (!has_token || token != this->token))
      error =
          "the job token does not match (DSCORE_JOB_TOKEN): only the ranks their launcher "
          "started may join this job's store";
    else if (version != kVersion)
      error = "protocol version " + std::to_string(version) + " (this store speaks " +
              std::to_string(kVersion) + "): every rank must run the same dscore";
    else if (static_cast<int>(world_size) != world || static_cast<int>(rank) >= world)
      error = "rank " + std::to_string(rank) + " of a world of " + std::to_string(world_size) +
              " reached the store of a job of " + std::to_string(world) +
              " ranks: every rank needs the same world size, and each job its own MASTER_PORT";
    if (!error.empty()) {
      c.out += frame(reply(DSCORE_INVALID_ARGUMENT, error));
      flush(id, c);
      c.closing = true;
      return;
    }
    c.rank = static_cast<int>(rank);
    ranks_seen.insert(c.rank);
    c.out += frame(reply(DSCORE_OK, kMagic));
  } else if (op == kSet) {
    std::string key;
    if (!r.str(&key)) return drop(id, c, false);
    std::string value(r.rest());
    for (auto it = waiters.begin(); it != waiters.end();) {
      auto waiting = conns.find(it->conn);
      if (it->key != key || waiting == conns.end()) {
        ++it;
        continue;
      }
      waiting->second.out += frame(reply(DSCORE_OK, value));
      it = waiters.erase(it);
    }
    values[key] = std::move(value);
    c.out += frame(reply(DSCORE_OK, ""));
  } else if (op == kGet) {
    handle_get(id, c, r);
  } else {
    drop(id, c, false);
  }
}

void Server::State::handle_get(uint64_t id, Conn& c, Reader& r) {
  uint64_t timeout = 0;
  std::string key;
  if (!r.u64(&timeout) || !r.str(&key)) return drop(id, c, false);
  auto found = values.find(key);
  if (found != values.end()) {
    c.out += frame(reply(DSCORE_OK, found->second));
  } else if (!failed.empty()) {
    c.out += frame(reply(DSCORE_UNAVAILABLE, failed_text()));
  } else if (timeout == 0) {
    c.out += frame(reply(DSCORE_DEADLINE_EXCEEDED, ranks_text()));
  } else {
    // < 0, or past a century: no deadline (and no overflow).
    const auto ms = static_cast<int64_t>(timeout);
    const Clock::time_point deadline = ms < 0 || ms > int64_t{100} * 365 * 24 * 3600 * 1000
                                           ? Clock::time_point::max()
                                           : Clock::now() + std::chrono::milliseconds(ms);
    waiters.push_back({id, std::move(key), deadline});
  }
}

void Server::State::drop(uint64_t id, Conn& c, bool failed_rank) {
  c.closing = true;
  waiters.remove_if([id](const Waiter& w) { return w.conn == id; });
  if (!failed_rank || c.said_bye || c.rank < 0) return;
  failed.emplace(c.rank, "rank " + std::to_string(c.rank) +
                             " lost its connection to the store without closing it (the rank "
                             "exited or was killed)");
  for (const Waiter& w : waiters) {
    auto waiting = conns.find(w.conn);
    if (waiting != conns.end())
      waiting->second.out += frame(reply(DSCORE_UNAVAILABLE, failed_text()));
  }
  waiters.clear();
}

void Server::State::flush(uint64_t id, Conn& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) drop(id, c, true);
      return;
    }
  }
}

void Server::State::expire_waiters() {
  const Clock::time_point now = Clock::now();
  for (auto it = waiters.begin(); it != waiters.end();) {
    auto waiting = conns.find(it->conn);
    if (it->deadline > now || waiting == conns.end()) {
      ++it;
      continue;
    }
    waiting->second.out += frame(reply(DSCORE_DEADLINE_EXCEEDED, ranks_text()));
    it = waiters.erase(it);
  }
}

int Server::State::poll_timeout() const {
  Clock::time_point next = Clock::time_point::max();
  for (const Waiter& w : waiters) next = std::min(next, w.deadline);
  if (next == Clock::time_point::max()) return -1;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

std::string Server::State::ranks_text() const {
  std::string text = std::to_string(ranks_seen.size()) + " of " + std::to_string(world) +
                     " ranks have connected to it";
  if (static_cast<int>(ranks_seen.size()) == world) return text;
  text += "; not yet:";
  int listed = 0;
  for (int r = 0; r < world && listed < 8; ++r)
    if (ranks_seen.count(r) == 0) text += (listed++ ? ", " : " ") + std::to_string(r);
  if (world - static_cast<int>(ranks_seen.size()) > listed) text += ", ...";
  return text;
}

std::string Server::State::failed_text() const {
  std::string text;
  for (const auto& [rank, what] : failed) text += (text.empty() ? "" : "; ") + what;
  return text;
}

}  // namespace dscore::comm::tcp_kv
