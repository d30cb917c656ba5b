// The little HTTP/1.1 `dscore serve` speaks: one request per connection
// (every response closes it), bodies by Content-Length, responses whole or
// as a server-sent event stream. Sockets are written with MSG_NOSIGNAL, so
// a client that left is a failed write, never a SIGPIPE.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace dscore::serve {

struct HttpRequest {
  std::string method, target;                                // "POST", "/v1/completions"
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  // The header's value, "" when absent.
  std::string header(std::string_view name) const;
};

struct HttpLimits {
  size_t max_head = 16 << 10;  // request line and headers
  size_t max_body = 1 << 20;
  int timeout_ms = 30000;  // for the whole request to arrive
};

// One request from `fd`. INVALID_ARGUMENT: malformed (a 400);
// RESOURCE_EXHAUSTED: over the limits (a 413); DEADLINE_EXCEEDED: too slow
// (a 408); UNAVAILABLE: the client closed first.
Result<HttpRequest> read_request(int fd, const HttpLimits& limits = {});

// Writes all of `data`; false when the client is gone (or stalls 30 s).
bool send_all(int fd, std::string_view data);

// A whole response with a body (Content-Length, Connection: close).
std::string response(int status, std::string_view content_type, std::string_view body);
// The head of a server-sent event stream (text/event-stream, no length),
// and one event of it ("data: <payload>\n\n").
std::string event_stream_head();
std::string event(std::string_view payload);

// A listening TCP socket on `host` (a literal IPv4 address; 127.0.0.1:
// this machine only) at `port` (0: a free one, see port()).
class Listener {
 public:
  static Result<Listener> open(const std::string& host, int port);
  Listener(Listener&& other) noexcept;
  Listener& operator=(Listener&&) = delete;
  ~Listener();
  int port() const { return port_; }
  // A connection's socket, -1 when none came within timeout_ms.
  int accept(int timeout_ms);

 private:
  Listener(int fd, int port) : fd_(fd), port_(port) {}
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace dscore::serve
