// Streams and events for the CUDA emulation (include/cuda_emulation.h).
// A created stream is a worker thread that runs its work in order, apart
// from the caller: a launch, copy, GEMM, collective or host function
// returns before it runs, as on the GPU, so a missing wait or
// synchronisation reads stale data here too. A stream belongs to the
// device current when it was made. The legacy default stream (0) runs its
// work on the caller once every blocking stream of the current device is
// idle (its implicit synchronisation); streams created
// cudaStreamNonBlocking, as dscore's are, do not take part in it.
// cudaDeviceSynchronize (and cudaFree) waits for the current device's
// streams. An event's record completes when its stream reaches it; a
// wait or synchronisation is for the latest record at the call.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "cuda_emulation.h"

struct CUstream_st {
  CUstream_st(int device_, bool blocking_)
      : device(device_), blocking(blocking_), worker([this] { run(); }) {}
  ~CUstream_st() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    worker.join();  // after the work enqueued before, as cudaStreamDestroy's
  }

  void enqueue(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      tasks.push_back(std::move(task));
    }
    wake.notify_all();
  }
  void synchronize() {
    std::unique_lock<std::mutex> lock(mutex);
    idle.wait(lock, [&] { return tasks.empty() && !busy; });
  }
  bool done() {
    std::lock_guard<std::mutex> lock(mutex);
    return tasks.empty() && !busy;
  }

  const int device;     // the device current when it was created
  const bool blocking;  // synchronises with its device's legacy default stream

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stopping || !tasks.empty(); });
      if (tasks.empty()) return;  // stopping, and drained
      std::function<void()> task = std::move(tasks.front());
      tasks.pop_front();
      busy = true;
      lock.unlock();
      try {
        task();
      } catch (const std::exception& e) {  // a kernel's error: the device is lost
        std::fprintf(stderr, "%s\n", e.what());
        std::abort();
      }
      lock.lock();
      busy = false;
      if (tasks.empty()) idle.notify_all();
    }
  }

  std::mutex mutex;
  std::condition_variable wake, idle;
  std::deque<std::function<void()>> tasks;
  bool busy = false, stopping = false;
  std::thread worker;  // last: starts once the rest is built
};

namespace {

// One cudaEventRecord: done when its stream reaches it. A wait captures the
// record it was issued after, so an event recorded again (on any stream)
// does not release an earlier wait, as on the GPU.
struct Record {
  std::mutex mutex;
  std::condition_variable changed;
  bool done = false;
  std::chrono::steady_clock::time_point when;
  bool reached() {
    std::lock_guard<std::mutex> lock(mutex);
    return done;
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return done; });
  }
};

std::atomic<uint64_t> g_device_synchronizations{0}, g_legacy_operations{0},
    g_stream_synchronizations{0}, g_event_synchronizations{0};

std::mutex g_streams_mutex;
std::set<cudaStream_t> g_streams;  // every created stream

bool is_legacy(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

// (A stream destroyed meanwhile is the caller's race, as with cudart.)
// The current device's streams (all, or the blocking ones).
void synchronize_streams(bool blocking_only) {
  const int device = dscore::cuda_emulation::current_device();
  std::set<cudaStream_t> streams;
  {
    std::lock_guard<std::mutex> lock(g_streams_mutex);
    streams = g_streams;
  }
  for (cudaStream_t s : streams)
    if (s->device == device && (!blocking_only || s->blocking)) s->synchronize();
}

}  // namespace

struct CUevent_st {
  std::mutex mutex;
  std::shared_ptr<Record> last;  // the latest record; none before the first
  std::shared_ptr<Record> latest() {
    std::lock_guard<std::mutex> lock(mutex);
    return last;
  }
};

namespace dscore::cuda_emulation {

void enqueue(cudaStream_t stream, std::function<void()> task) {
  if (!is_legacy(stream)) return stream->enqueue(std::move(task));
  ++g_legacy_operations;
  synchronize_streams(/*blocking_only=*/true);
  task();
}

void synchronize(cudaStream_t stream) {
  ++g_stream_synchronizations;
  if (is_legacy(stream))
    synchronize_streams(/*blocking_only=*/true);
  else
    stream->synchronize();
}

void synchronize_device() {
  ++g_device_synchronizations;
  synchronize_streams(/*blocking_only=*/false);
}

Counters counters() {
  Counters c;
  c.device_synchronizations = g_device_synchronizations;
  c.legacy_stream_operations = g_legacy_operations;
  c.stream_synchronizations = g_stream_synchronizations;
  c.event_synchronizations = g_event_synchronizations;
  return c;
}

}  // namespace dscore::cuda_emulation

using dscore::cuda_emulation::enqueue;

extern "C" {

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  *stream = new CUstream_st(dscore::cuda_emulation::current_device(),
                            (flags & cudaStreamNonBlocking) == 0);
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  g_streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  if (is_legacy(stream)) return cudaErrorInvalidResourceHandle;
  {
    std::lock_guard<std::mutex> lock(g_streams_mutex);
    if (g_streams.erase(stream) == 0) return cudaErrorInvalidResourceHandle;
  }
  delete stream;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  if (is_legacy(stream)) return cudaSuccess;  // its work runs on the caller
  return stream->done() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  dscore::cuda_emulation::synchronize(stream);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  dscore::cuda_emulation::synchronize_device();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  if (fn == nullptr) return cudaErrorInvalidValue;
  enqueue(stream, [fn, data] { fn(data); });
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, 0);
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  auto record = std::make_shared<Record>();
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    event->last = record;
  }
  enqueue(stream, [record] {
    {
      std::lock_guard<std::mutex> lock(record->mutex);
      record->done = true;
      record->when = std::chrono::steady_clock::now();
    }
    record->changed.notify_all();
  });
  return cudaSuccess;
}

// The stream's later work waits for the event's latest record (none: no wait).
cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  if (std::shared_ptr<Record> record = event->latest())
    enqueue(stream, [record] { record->wait(); });
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  const std::shared_ptr<Record> record = event->latest();
  return record == nullptr || record->reached() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  ++g_event_synchronizations;
  if (std::shared_ptr<Record> record = event->latest()) record->wait();
  return cudaSuccess;
}

// Host time between the two records' completions.
cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr) return cudaErrorInvalidResourceHandle;
  const std::shared_ptr<Record> a = start->latest(), b = end->latest();
  if (a == nullptr || b == nullptr) return cudaErrorInvalidResourceHandle;
  if (!a->reached() || !b->reached()) return cudaErrorNotReady;
  if (a == b) {
    *ms = 0.0f;
    return cudaSuccess;
  }
  std::scoped_lock lock(a->mutex, b->mutex);
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}

}  // extern "C"
