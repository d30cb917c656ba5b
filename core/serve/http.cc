#include "core/serve/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace dscore::serve {
namespace {

using Clock = std::chrono::steady_clock;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

// Appends what arrives before the deadline; false at its end or a close.
Status receive_more(int fd, std::string* buffer, Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return Status(DSCORE_DEADLINE_EXCEEDED, "the request took too long");
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
  if (ready == 0) return Status(DSCORE_DEADLINE_EXCEEDED, "the request took too long");
  if (ready < 0) return Status(DSCORE_UNAVAILABLE, std::string("poll: ") + std::strerror(errno));
  char chunk[8192];
  const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
  if (n <= 0) return Status(DSCORE_UNAVAILABLE, "the client closed the connection");
  buffer->append(chunk, static_cast<size_t>(n));
  return Status::Ok();
}

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key == name) return value;
  return "";
}

Result<HttpRequest> read_request(int fd, const HttpLimits& limits) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(limits.timeout_ms);
  std::string buffer;
  size_t head_end;
  while ((head_end = buffer.find("\r\n\r\n")) == std::string::npos) {
    if (buffer.size() > limits.max_head)
      return Status(DSCORE_RESOURCE_EXHAUSTED,
                    "the request's headers exceed " + std::to_string(limits.max_head) + " bytes");
    DSCORE_RETURN_IF_ERROR(receive_more(fd, &buffer, deadline));
  }
  HttpRequest request;
  const std::string head = buffer.substr(0, head_end);
  size_t line_end = head.find("\r\n");
  const std::string line = head.substr(0, line_end);
  const size_t s1 = line.find(' '), s2 = line.rfind(' ');
  if (s1 == std::string::npos || s2 == s1 || line.compare(s2 + 1, 5, "HTTP/") != 0)
    return invalid_argument("a malformed request line: \"" + line.substr(0, 80) + "\"");
  request.method = line.substr(0, s1);
  request.target = line.substr(s1 + 1, s2 - s1 - 1);
  while (line_end != std::string::npos) {
    const size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string field =
        head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
    const size_t colon = field.find(':');
    if (colon == std::string::npos || colon == 0)
      return invalid_argument("a malformed header line: \"" + field.substr(0, 80) + "\"");
    request.headers.emplace_back(lower(field.substr(0, colon)), trim(field.substr(colon + 1)));
  }
  if (!request.header("transfer-encoding").empty())
    return invalid_argument("chunked request bodies are not supported: send Content-Length");
  size_t length = 0;
  const std::string declared = request.header("content-length");
  if (!declared.empty()) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(declared.c_str(), &end, 10);
    if (end == declared.c_str() || *end != '\0')
      return invalid_argument("Content-Length \"" + declared + "\" is not a number");
    if (v > limits.max_body)
      return Status(DSCORE_RESOURCE_EXHAUSTED,
                    "the body exceeds " + std::to_string(limits.max_body) + " bytes");
    length = static_cast<size_t>(v);
  }
  request.body = buffer.substr(head_end + 4);
  while (request.body.size() < length)
    DSCORE_RETURN_IF_ERROR(receive_more(fd, &request.body, deadline));
  request.body.resize(length);
  return request;
}

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 30000) <= 0 || (p.revents & (POLLERR | POLLHUP)) != 0) return false;
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string response(int status, std::string_view content_type, std::string_view body) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) +
                    "\r\nContent-Type: " + std::string(content_type) +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n\r\n";
  out.append(body);
  return out;
}

std::string event_stream_head() {
  return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
         "Connection: close\r\n\r\n";
}

std::string event(std::string_view payload) { return "data: " + std::string(payload) + "\n\n"; }

Result<Listener> Listener::open(const std::string& host, int port) {
  in_addr address{};
  if (::inet_pton(AF_INET, host.c_str(), &address) != 1)
    return invalid_argument("--host " + host + " is not an IPv4 address (e.g. 127.0.0.1)");
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(DSCORE_INTERNAL, std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr = address;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 128) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Status(DSCORE_UNAVAILABLE, "cannot listen at " + host + ":" + std::to_string(port) +
                                          ": " + why +
                                          " (is the port taken? pick another with --port)");
  }
  socklen_t size = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size);
  return Listener(fd, ntohs(a.sin_port));
}

Listener::Listener(Listener&& other) noexcept : fd_(other.fd_), port_(other.port_) {
  other.fd_ = -1;
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

int Listener::accept(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return -1;
  return ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
}

}  // namespace dscore::serve
