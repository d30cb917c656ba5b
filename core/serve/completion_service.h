// The one thread that runs a model for `dscore serve`: requests from any
// connection join a BatchGenerator (core/app/batch_generator.h) between its
// steps, and each step's tokens go back to their requests' streams:
// continuous batching. A request waits when every slot is busy; past
// `max_waiting` waiting requests, submit() refuses (the server's 429).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "core/app/batch_generator.h"
#include "core/base/status.h"

namespace dscore::serve {

class CompletionService {
 public:
  CompletionService(std::unique_ptr<BatchGenerator> generator, size_t max_waiting);
  ~CompletionService();  // stops the thread; open streams end UNAVAILABLE
  CompletionService(const CompletionService&) = delete;
  CompletionService& operator=(const CompletionService&) = delete;

  // One request's tokens as the steps make them.
  class Stream {
   public:
    // The next event (waits for it); an error when the model failed or the
    // service stopped.
    Result<GenerationEvent> next();
    // The client is gone: the request leaves the batch at the next step.
    void cancel() { cancelled_ = true; }

   private:
    friend class CompletionService;
    void push(const GenerationEvent& e);
    void fail(const Status& status);
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<GenerationEvent> events_;
    Status error_;
    std::atomic<bool> cancelled_{false};
  };

  // RESOURCE_EXHAUSTED when max_waiting requests wait already.
  Result<std::shared_ptr<Stream>> submit(GenerationRequest request);

 private:
  void run();
  std::unique_ptr<BatchGenerator> generator_;  // the thread's alone
  size_t max_waiting_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<GenerationRequest, std::shared_ptr<Stream>>> incoming_;
  std::atomic<size_t> queued_{0};  // waiting in the generator after its last step
  bool stop_ = false;
  std::map<int64_t, std::shared_ptr<Stream>> streams_;  // by generator id; the thread's alone
  std::thread thread_;
};

}  // namespace dscore::serve
