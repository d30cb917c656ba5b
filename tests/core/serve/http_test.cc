// The HTTP side of `dscore serve` over a socket pair: a request with its
// headers and Content-Length body, requests split over several writes,
// malformed and oversized ones refused with the reason, a closed client,
// and responses as written.
#include "core/serve/http.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace dscore::serve {
namespace {

// Reads a request while `text` is written (in pieces of `piece` bytes).
Result<HttpRequest> read_written(const std::string& text, size_t piece = 1 << 20,
                                 const HttpLimits& limits = {}) {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::thread writer([&] {
    for (size_t i = 0; i < text.size(); i += piece) send_all(fds[1], text.substr(i, piece));
    ::shutdown(fds[1], SHUT_WR);
  });
  Result<HttpRequest> r = read_request(fds[0], limits);
  writer.join();
  ::close(fds[0]);
  ::close(fds[1]);
  return r;
}

TEST(Http, ReadsTheRequestLineHeadersAndBody) {
  auto r = read_written(
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
      "Content-Length: 13\r\n\r\n{\"prompt\":1}\n",
      3);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->method, "POST");
  EXPECT_EQ(r->target, "/v1/completions?x=1");
  EXPECT_EQ(r->header("content-type"), "application/json");
  EXPECT_EQ(r->body, "{\"prompt\":1}\n");
}

TEST(Http, RefusesMalformedOversizedAndUnfinishedRequests) {
  auto bad = read_written("NONSENSE\r\n\r\n");
  EXPECT_EQ(bad.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(bad.status().message().find("NONSENSE"), std::string::npos);
  auto length = read_written("POST / HTTP/1.1\r\nContent-Length: x1\r\n\r\n");
  EXPECT_NE(length.status().message().find("Content-Length \"x1\""), std::string::npos);
  auto chunked = read_written("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(chunked.status().code(), DSCORE_INVALID_ARGUMENT);
  HttpLimits small;
  small.max_body = 10;
  auto big =
      read_written("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n01234567890", 1 << 20, small);
  EXPECT_EQ(big.status().code(), DSCORE_RESOURCE_EXHAUSTED);
  auto closed = read_written("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
  EXPECT_EQ(closed.status().code(), DSCORE_UNAVAILABLE);
}

TEST(Http, ResponsesCarryTheirLengthAndEventsTheirData) {
  EXPECT_EQ(response(400, "application/json", "{}"),
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
            "Connection: close\r\n\r\n{}");
  EXPECT_EQ(event("[DONE]"), "data: [DONE]\n\n");
}

TEST(Http, AListenerOnPortZeroGetsAFreePortAndRefusesAHostName) {
  auto listener = Listener::open("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  EXPECT_GT(listener->port(), 0);
  EXPECT_EQ(listener->accept(10), -1);  // nobody connects
  EXPECT_EQ(Listener::open("localhost", 0).status().code(), DSCORE_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace dscore::serve
