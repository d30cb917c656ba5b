// `dscore serve`'s HTTP side: an accept loop, each connection on its own
// thread (at most max_connections at once; beyond, a 503), routing
//   GET  /health           {"status": "ok"}
//   GET  /v1/models        the one model
//   POST /v1/completions   a completion (completions_api.h), whole or
//                          streamed as server-sent events ending in [DONE]
// to the CompletionService. A client that leaves mid-stream cancels its
// request; the server goes on.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/serve/completion_service.h"
#include "core/serve/completions_api.h"
#include "core/serve/http.h"

namespace dscore::serve {

class CompletionServer {
 public:
  CompletionServer(CompletionService& service, ServedModel model, size_t max_connections = 256)
      : service_(service), model_(std::move(model)), max_connections_(max_connections) {}
  // Serves until `stop` turns true (looked at every 100 ms), then waits for
  // the open connections to finish.
  void serve(Listener& listener, const std::atomic<bool>& stop);

 private:
  void handle(int fd);
  void completions(int fd, const HttpRequest& request);
  void stream(int fd, CompletionService::Stream& stream, const std::string& id, int64_t created);

  CompletionService& service_;
  ServedModel model_;
  size_t max_connections_;
  std::atomic<size_t> open_{0};
  std::atomic<int64_t> next_id_{0};
};

}  // namespace dscore::serve
