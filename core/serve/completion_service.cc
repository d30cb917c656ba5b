#include "core/serve/completion_service.h"

#include <chrono>
#include <vector>

namespace dscore::serve {

Result<GenerationEvent> CompletionService::Stream::next() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return !events_.empty() || !error_.ok(); });
  if (!events_.empty()) {
    GenerationEvent e = events_.front();
    events_.pop_front();
    return e;
  }
  return error_;
}

void CompletionService::Stream::push(const GenerationEvent& e) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(e);
  }
  ready_.notify_all();
}

void CompletionService::Stream::fail(const Status& status) {
  {
    std::lock_guard lock(mutex_);
    error_ = status;
  }
  ready_.notify_all();
}

CompletionService::CompletionService(std::unique_ptr<BatchGenerator> generator, size_t max_waiting)
    : generator_(std::move(generator)), max_waiting_(max_waiting), thread_([this] { run(); }) {}

CompletionService::~CompletionService() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  const Status stopped(DSCORE_UNAVAILABLE, "the server is shutting down");
  for (auto& [id, stream] : streams_) stream->fail(stopped);
  for (auto& [request, stream] : incoming_) stream->fail(stopped);
}

Result<std::shared_ptr<CompletionService::Stream>> CompletionService::submit(
    GenerationRequest request) {
  auto stream = std::make_shared<Stream>();
  {
    std::lock_guard lock(mutex_);
    if (incoming_.size() + queued_ >= max_waiting_)
      return Status(DSCORE_RESOURCE_EXHAUSTED,
                    "the queue is full: " + std::to_string(max_waiting_) +
                        " requests are waiting for a slot; retry later (or start the server "
                        "with a larger --max-queue or --batch-size)");
    incoming_.emplace_back(std::move(request), stream);
  }
  wake_.notify_all();
  return stream;
}

void CompletionService::run() {
  for (;;) {
    std::deque<std::pair<GenerationRequest, std::shared_ptr<Stream>>> arrived;
    {
      std::unique_lock lock(mutex_);
      // Idle: wait for a request. Busy: a short wait lets cancellations in.
      wake_.wait_for(
          lock, generator_->idle() ? std::chrono::milliseconds(200) : std::chrono::milliseconds(0),
          [&] { return stop_ || !incoming_.empty(); });
      if (stop_) return;
      arrived.swap(incoming_);
    }
    for (auto& [request, stream] : arrived) {
      auto id = generator_->add(std::move(request));
      if (id.ok())
        streams_[*id] = std::move(stream);
      else
        stream->fail(id.status());
    }
    for (auto it = streams_.begin(); it != streams_.end();) {
      if (it->second->cancelled_) {
        generator_->cancel(it->first);
        it = streams_.erase(it);
      } else {
        ++it;
      }
    }
    if (generator_->idle()) continue;
    auto events = generator_->step();
    if (!events.ok()) {  // the model failed: every request in flight ends with its error
      for (auto& [id, stream] : streams_) {
        stream->fail(events.status());
        generator_->cancel(id);
      }
      streams_.clear();
      continue;
    }
    for (const GenerationEvent& e : *events) {
      auto it = streams_.find(e.id);
      if (it == streams_.end()) continue;
      it->second->push(e);
      if (e.finished) streams_.erase(it);
    }
    queued_ = generator_->waiting();
  }
}

}  // namespace dscore::serve
