#include "core/device/cpu_device.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "core/base/engine_scope.h"
#include "core/base/strings.h"
#include "core/device/task.h"

namespace dscore::device {
namespace {

int64_t since_ns(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start)
      .count();
}

// What a stream and the events it records share (events may outlive it).
struct Core {
  std::mutex mutex;
  std::condition_variable done;
  std::atomic<int64_t> blocked_ns{0};
};

struct Ticket {
  bool done = false;
  Status status;
};

class CpuEvent final : public Event {
 public:
  CpuEvent(std::shared_ptr<Core> core, std::shared_ptr<Ticket> ticket)
      : core_(std::move(core)), ticket_(std::move(ticket)) {}
  Status wait() override {
    const auto start = std::chrono::steady_clock::now();
    Status status = wait_uncounted();
    core_->blocked_ns += since_ns(start);
    return status;
  }
  // For a stream's worker waiting on another stream: not a caller blocked.
  Status wait_uncounted() {
    std::unique_lock<std::mutex> lock(core_->mutex);
    core_->done.wait(lock, [&] { return ticket_->done; });
    return ticket_->status;
  }
  bool done() const override {
    std::lock_guard<std::mutex> lock(core_->mutex);
    return ticket_->done;
  }

 private:
  std::shared_ptr<Core> core_;
  std::shared_ptr<Ticket> ticket_;
};

Status wait_event(const EventPtr& event) {
  if (!event) return Status::Ok();
  if (auto* cpu = dynamic_cast<CpuEvent*>(event.get())) return cpu->wait_uncounted();
  return event->wait();
}

// Runs each task at once on the caller.
class SynchronousStream final : public Stream {
 public:
  explicit SynchronousStream(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  void enqueue(Task task) override {
    if (sticky_.ok()) sticky_ = run_task(task, name_);
  }
  EventPtr record() override {
    auto ticket = std::make_shared<Ticket>();
    ticket->done = true;
    ticket->status = sticky_;
    return std::make_shared<CpuEvent>(core_, std::move(ticket));
  }
  void wait(const EventPtr& event) override {
    if (!sticky_.ok()) return;
    const auto start = std::chrono::steady_clock::now();
    sticky_ = wait_event(event);
    core_->blocked_ns += since_ns(start);
  }
  Status synchronize() override { return sticky_; }
  Status status() const override { return sticky_; }
  void* native() const override { return nullptr; }
  int64_t blocked_ns() const override { return core_->blocked_ns.load(); }

 private:
  std::string name_;
  std::shared_ptr<Core> core_ = std::make_shared<Core>();
  Status sticky_;
};

// Runs its tasks in order on a worker thread of its own.
class AsynchronousStream final : public Stream {
 public:
  // The worker works for the engine of the thread that makes the stream
  // (its log rank and memory ledger: engine_scope.h).
  explicit AsynchronousStream(std::string name)
      : name_(std::move(name)), worker_([this, engine = EngineScope::current()] {
          EngineScope scope(engine);
          loop();
        }) {}
  ~AsynchronousStream() override {
    {
      std::lock_guard<std::mutex> lock(core_->mutex);
      stopping_ = true;
    }
    work_.notify_all();
    worker_.join();
  }
  std::string_view name() const override { return name_; }

  void enqueue(Task task) override {
    // Counted as blocked: waking the worker can hand it this thread's core
    // (fewer cores than threads), and the caller then waits here.
    const auto start = std::chrono::steady_clock::now();
    auto ticket = std::make_shared<Ticket>();
    {
      std::lock_guard<std::mutex> lock(core_->mutex);
      queue_.emplace_back(std::move(task), ticket);
      last_ = std::move(ticket);
    }
    work_.notify_one();
    core_->blocked_ns += since_ns(start);
  }
  EventPtr record() override {
    std::lock_guard<std::mutex> lock(core_->mutex);
    if (!last_) {
      last_ = std::make_shared<Ticket>();
      last_->done = true;
    }
    return std::make_shared<CpuEvent>(core_, last_);
  }
  void wait(const EventPtr& event) override {
    if (!event || event->done()) {
      // Already done: nothing to order, except a failure to inherit.
      Status status = wait_event(event);
      if (!status.ok()) enqueue([status] { return status; });
      return;
    }
    enqueue([event] { return wait_event(event); });
  }
  Status synchronize() override { return record()->wait(); }
  Status status() const override {
    std::lock_guard<std::mutex> lock(core_->mutex);
    return sticky_;
  }
  void* native() const override { return nullptr; }
  int64_t blocked_ns() const override { return core_->blocked_ns.load(); }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(core_->mutex);
    for (;;) {
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      auto [task, ticket] = std::move(queue_.front());
      queue_.pop_front();
      Status status = sticky_;
      if (status.ok()) {
        lock.unlock();
        status = run_task(task, name_);
        task = nullptr;  // release what the task captured outside the lock
        lock.lock();
        if (!status.ok() && sticky_.ok()) sticky_ = status;
      }
      ticket->status = status;
      ticket->done = true;
      core_->done.notify_all();
    }
  }

  std::string name_;
  std::shared_ptr<Core> core_ = std::make_shared<Core>();
  std::condition_variable work_;
  std::deque<std::pair<Task, std::shared_ptr<Ticket>>> queue_;
  std::shared_ptr<Ticket> last_;
  Status sticky_;
  bool stopping_ = false;
  std::thread worker_;  // last: starts after the members above exist
};

dscore_memory_kind memory_kind(Placement placement) {
  return placement == Placement::kPinned ? DSCORE_MEMORY_PINNED : DSCORE_MEMORY_HOST;
}

}  // namespace

const char* device_type_name(DeviceType type) { return type == DeviceType::kCuda ? "cuda" : "cpu"; }

std::unique_ptr<Stream> make_cpu_stream(std::string name, CpuStreams mode) {
  if (mode == CpuStreams::kSynchronous) return std::make_unique<SynchronousStream>(std::move(name));
  return std::make_unique<AsynchronousStream>(std::move(name));
}

std::string CpuDevice::describe() const {
  return std::string("cpu (") +
         (streams_ == CpuStreams::kSynchronous ? "synchronous" : "asynchronous") + " streams" +
         (memory_ == CpuMemory::kSeparate ? ", device memory treated as separate" : "") + ")";
}

int32_t CpuDevice::tensor_device_type() const { return DSCORE_DEVICE_CPU; }

Result<std::unique_ptr<Stream>> CpuDevice::create_stream(std::string name) {
  return make_cpu_stream(std::move(name), streams_);
}

Result<Buffer> CpuDevice::allocate(size_t bytes, Placement placement, MemoryUse use,
                                   std::string_view name, bool zero) {
  const dscore_memory_kind kind = memory_kind(placement);
  void* data = counted_alloc(bytes == 0 ? 1 : bytes, 64, kind, use, name);
  if (!data) {
    return Status(DSCORE_RESOURCE_EXHAUSTED, "could not allocate " + std::to_string(bytes) +
                                                 " bytes (" + format_bytes(bytes) +
                                                 ") of host memory for " + std::string(name));
  }
  if (zero) std::memset(data, 0, bytes);
  return Buffer(data, bytes, placement, [kind](void* p) { counted_free(p, kind); });
}

void CpuDevice::copy(void* dst, const void* src, size_t bytes, Stream& stream) {
  stream.enqueue([=] {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  });
}

void CpuDevice::fill_zero(void* dst, size_t bytes, Stream& stream) {
  stream.enqueue([=] {
    std::memset(dst, 0, bytes);
    return Status::Ok();
  });
}

}  // namespace dscore::device
