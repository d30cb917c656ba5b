#include "core/serve/server.h"

#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/base/logging.h"
#include "core/config/json.h"

namespace dscore::serve {
namespace {

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void reply_error(int fd, int status, const std::string& message, const std::string& type) {
  send_all(fd, response(status, "application/json", error_body(message, type)));
}

// The HTTP status of a failed request's Status.
int status_of(const Status& s) {
  switch (s.code()) {
    case DSCORE_INVALID_ARGUMENT:
      return 400;
    case DSCORE_RESOURCE_EXHAUSTED:
      return 413;
    case DSCORE_DEADLINE_EXCEEDED:
      return 408;
    default:
      return 500;
  }
}

}  // namespace

void CompletionServer::serve(Listener& listener, const std::atomic<bool>& stop) {
  while (!stop) {
    const int fd = listener.accept(100);
    if (fd < 0) continue;
    if (open_ >= max_connections_) {
      reply_error(
          fd, 503,
          "the server has " + std::to_string(max_connections_) + " connections open; retry later",
          "server_busy");
      ::close(fd);
      continue;
    }
    open_ += 1;
    std::thread([this, fd] {
      handle(fd);
      ::close(fd);
      open_ -= 1;
    }).detach();
  }
  while (open_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void CompletionServer::handle(int fd) {
  auto request = read_request(fd);
  if (!request.ok()) {
    if (request.status().code() != DSCORE_UNAVAILABLE)
      reply_error(fd, status_of(request.status()), request.status().message(),
                  "invalid_request_error");
    return;
  }
  const std::string path = request->target.substr(0, request->target.find('?'));
  const bool get = request->method == "GET", post = request->method == "POST";
  if (path == "/health" && get) {
    send_all(fd, response(200, "application/json", R"({"status":"ok"})"));
  } else if (path == "/v1/models" && get) {
    json::Value entry = json::Value::object();
    entry.set("id", json::Value(model_.name));
    entry.set("object", json::Value("model"));
    entry.set("owned_by", json::Value("dscore"));
    json::Value data = json::Value::array();
    data.push_back(std::move(entry));
    json::Value out = json::Value::object();
    out.set("object", json::Value("list"));
    out.set("data", std::move(data));
    send_all(fd, response(200, "application/json", json::serialize(out)));
  } else if (path == "/v1/completions" && post) {
    completions(fd, *request);
  } else if (path == "/health" || path == "/v1/models" || path == "/v1/completions") {
    reply_error(fd, 405, request->method + " " + path + " is not allowed", "invalid_request_error");
  } else {
    reply_error(fd, 404,
                "no such endpoint: " + path +
                    " (dscore serve answers /v1/completions, "
                    "/v1/models and /health)",
                "invalid_request_error");
  }
}

void CompletionServer::completions(int fd, const HttpRequest& request) {
  auto parsed = parse_completion_request(request.body, model_);
  if (!parsed.ok()) {
    reply_error(fd, 400, parsed.status().message(), "invalid_request_error");
    return;
  }
  const int64_t prompt_tokens = static_cast<int64_t>(parsed->generation.prompt.size());
  auto submitted = service_.submit(std::move(parsed->generation));
  if (!submitted.ok()) {
    reply_error(fd, 429, submitted.status().message(), "queue_full");
    return;
  }
  CompletionService::Stream& s = **submitted;
  const std::string id = "cmpl-" + std::to_string(next_id_++);
  const int64_t created = now_seconds();
  if (parsed->stream) return stream(fd, s, id, created);
  TextStream text(model_);
  std::string all;
  std::vector<int32_t> tokens;
  for (;;) {
    auto e = s.next();
    if (!e.ok()) {
      reply_error(fd, 500, e.status().message(), "server_error");
      return;
    }
    if (e->token >= 0) {
      tokens.push_back(e->token);
      all += text.add(e->token);
    }
    if (e->finished) {
      send_all(fd, response(200, "application/json",
                            completion_body(id, created, model_, all, tokens, e->finish_reason,
                                            prompt_tokens)));
      return;
    }
  }
}

void CompletionServer::stream(int fd, CompletionService::Stream& s, const std::string& id,
                              int64_t created) {
  if (!send_all(fd, event_stream_head())) {
    s.cancel();
    return;
  }
  TextStream text(model_);
  for (;;) {
    auto e = s.next();
    if (!e.ok()) {  // the model failed: the error as an event, then the end
      send_all(fd, event(error_body(e.status().message(), "server_error")));
      send_all(fd, event("[DONE]"));
      return;
    }
    const std::string delta = e->token >= 0 ? text.add(e->token) : "";
    if (!send_all(fd, event(chunk_body(id, created, model_, delta, e->token,
                                       e->finished ? e->finish_reason : "")))) {
      log_info("serve: " + id + "'s client left mid-stream; its request is cancelled");
      s.cancel();
      return;
    }
    if (e->finished) {
      send_all(fd, event("[DONE]"));
      return;
    }
  }
}

}  // namespace dscore::serve
