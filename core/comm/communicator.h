// A communicator: the comm backend plugin chosen by "comm.backend" ("auto":
// mpi for a multi-rank job, local for one rank), called through typed
// methods that count elements and bytes per collective (the ZeRO volume
// invariants and comms_logger read these), record the collective in flight
// (so the CLI can say where a rank was when the launcher ended it), and
// offer plugins that talk (OneBitAdam) the same counted calls through
// host_table(), which the engine installs in its host context as a group.
// split() forms sub-communicators (data-parallel, pipeline, expert groups).
// Calls must not overlap: make them as tasks on the engine's comm stream
// (core/device/device.h), or while it is idle.
#pragma once

#include <dscore/comm.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/comm/host_staging.h"
#include "core/comm/job_env.h"
#include "core/config/training_config.h"
#include "core/observability/comms_logger.h"
#include "core/plugin_host/comm_instance.h"
#include "core/plugin_host/registry.h"

namespace dscore::comm {

// A dense buffer for a collective: host memory, or the device memory of the
// device the engine computes on (device_type as in dscore_tensor).
struct CommBuffer {
  void* data = nullptr;
  dscore_dtype dtype = DSCORE_DTYPE_F32;
  int64_t numel = 0;
  dscore_device_type device_type = DSCORE_DEVICE_CPU;
  int32_t device_id = 0;  // the GPU ordinal for device memory
};

// Per collective: calls, and the elements and bytes of the full
// (unpartitioned) buffer it moves: allreduce/reduce/broadcast n,
// reduce_scatter the send buffer (world x chunk), allgather the recv buffer
// (world x chunk). Summed over a step, ZeRO-1/2 move 2 Psi elements and
// ZeRO-3 3 Psi.
struct OpCounter {
  uint64_t calls = 0;
  uint64_t elements = 0;
  uint64_t bytes = 0;
};

class Communicator {
 public:
  // Collective: every rank calls it. Errors name the backend and the fix.
  // The backend instance lives in `host` (nullptr: a context of its own).
  static Result<std::unique_ptr<Communicator>> create(
      const plugin_host::PluginRegistry& registry, const config::CommConfig& config,
      const JobEnv& env, uint64_t seed, std::shared_ptr<plugin_host::HostContext> host = nullptr);
  ~Communicator();

  // Collective over this communicator (MPI_Comm_split semantics): ranks
  // passing the same colour (>= 0) form a new communicator, ranked by key
  // and then by their rank here; DSCORE_COMM_SPLIT_NONE takes part and gets
  // nullptr. UNIMPLEMENTED when the backend cannot split. Counters, the
  // host-table group are the new communicator's own; the comms logger is
  // shared (what it records is the process's).
  Result<std::unique_ptr<Communicator>> split(int color, int key);

  // The table plugins receive from host->communicator(ctx, group); install
  // it with HostContext::set_communicator. Valid while this lives.
  const dscore_communicator* host_table() const { return &host_table_; }
  plugin_host::HostContext& host() const;
  // The collective running now (op nullptr when none), on this
  // communicator or one split from it. Async-signal-safe:
  // lock-free atomics under a seqlock, so the CLI's SIGTERM report can read
  // it on any thread while the comm thread updates it.
  struct InFlight {
    const char* op = nullptr;  // a string literal
    uint64_t sequence = 0;
    uint64_t elements = 0;
  };
  InFlight in_flight() const;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const JobEnv& env() const { return env_; }
  const std::string& backend() const { return instance_->info().name; }

  Status allreduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op);
  // recv is only used on `root`.
  Status reduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op, int root);
  Status reduce_scatter(CommBuffer send, CommBuffer recv, dscore_reduce_op op);
  Status allgather(CommBuffer send, CommBuffer recv);
  Status broadcast(CommBuffer buffer, int root);
  // Point to point: the peer makes the matching call. Blocking, within the
  // backend's timeout.
  Status send(CommBuffer buffer, int peer);
  Status recv(CommBuffer buffer, int peer);
  // UNIMPLEMENTED when the backend has none.
  Status all_to_all(CommBuffer send, CommBuffer recv);
  // Variable counts (comm.h all_to_all_v): per rank j, send_counts[j]
  // elements from send at send_offsets[j] go to j, recv_counts[j] from j
  // land at recv_offsets[j]; world_size() entries each. Counted as
  // DeepSpeed's all_to_all_single of the elements this rank sends.
  // UNIMPLEMENTED when the backend has none.
  struct AllToAllLayout {
    std::vector<int64_t> send_counts, send_offsets, recv_counts, recv_offsets;
  };
  Status all_to_all_v(CommBuffer send, CommBuffer recv, const AllToAllLayout& layout);
  Status barrier();

  // Grouped calls (comm.h group_start/group_end): the collectives `issue`
  // makes on this communicator may start together and complete only when
  // grouped() returns, so their buffers must stay valid and untouched until
  // then and no result may be read inside `issue`. Results equal the same
  // calls made one by one, bit for bit. A backend without the entries (an
  // older plugin) gets the calls one by one. Inside `issue` a call returns
  // OK once queued; after the first failure the remaining calls are skipped
  // (they return that error). The returned error names the failed op and
  // its place in the group; `issue`'s own error comes next. No nesting, no
  // send/recv/barrier/split inside. Make it on the comm stream like any
  // other call.
  Status grouped(const std::function<Status()>& issue);
  // Whether the backend runs groups itself (false: the one-by-one fallback).
  bool has_native_groups() const { return instance_->has_groups(); }

  // The stream collectives are enqueued on (the engine's comm stream's
  // native handle: a cudaStream_t on CUDA, nullptr on the CPU, where a
  // collective returns when it has completed). Set before the first call.
  void use_stream(void* stream) { stream_ = stream; }
  // Host buffers through device memory (host_staging.h), for a backend that
  // moves device memory only; set before the first call. Not inside
  // grouped(): a group's results may not be read before it ends.
  void stage_host_buffers(HostStaging staging) { staging_ = std::move(staging); }

  // End every rank of the job now (after a local fatal error).
  void abort(const std::string& reason);

  std::map<std::string, OpCounter> counters() const;
  uint64_t total_elements() const;
  void reset_counters();
  // What the backend reports it put on and took off the wire.
  Result<dscore_comm_counters> wire_counters() const;

  // DeepSpeed's comms_logger: time every profiled collective (host clock,
  // around the blocking call) under DeepSpeed's op names; verbose lines are
  // logged on rank 0. summary() is log_summary's table ("" when off).
  void enable_comms_logger(const observability::CommsLoggerConfig& config);
  std::string comms_summary() const;

 private:
  Communicator(JobEnv env, std::unique_ptr<plugin_host::CommInstance> instance);
  // Records the op (counters, in-flight record) around a backend call.
  // `ds_op` is DeepSpeed's function name for the comms logger, and
  // `message_bytes` its message size S (the input tensor's bytes).
  template <typename Call>
  Status counted(const char* op, const char* ds_op, uint64_t elements, size_t element_size,
                 uint64_t message_bytes, Call&& call);

  // The group being issued (grouped()): its calls so far, the first
  // failure, and the comms-logger records completed at its end.
  struct PendingLog {
    const char* ds_op;
    const char* op;
    uint64_t message_bytes;
    std::chrono::steady_clock::time_point start;
  };
  struct GroupState {
    bool active = false;
    bool native = false;  // the backend's group_start/group_end are in use
    int calls = 0;
    uint64_t elements = 0;
    Status first_error;
    std::vector<PendingLog> logs;
  };
  Status group_call(const char* op, const std::function<Status()>& call);
  // call(send, recv) with host buffers staged (stage_host_buffers), the
  // result copied back after it.
  Status with_staging(const CommBuffer& send, const CommBuffer& recv,
                      const std::function<Status(const CommBuffer&, const CommBuffer&)>& call);

  JobEnv env_;
  std::unique_ptr<plugin_host::CommInstance> instance_;
  GroupState group_;
  mutable std::mutex mutex_;
  std::map<std::string, OpCounter> counters_;
  uint64_t sequence_ = 0;
  void* stream_ = nullptr;
  HostStaging staging_;
  dscore_communicator host_table_{};
  void record_in_flight(const char* op, uint64_t sequence, uint64_t elements);
  struct InFlightRecord {
    std::atomic<uint64_t> version{0};
    std::atomic<const char*> op{nullptr};
    std::atomic<uint64_t> sequence{0};
    std::atomic<uint64_t> elements{0};
  };
  static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                    std::atomic<const char*>::is_always_lock_free,
                "the SIGTERM report reads these from a signal handler");
  // Shared with the communicators split from this one: the record of the
  // call running now on any of them (set before a group is used, never
  // changed after).
  std::shared_ptr<InFlightRecord> in_flight_ = std::make_shared<InFlightRecord>();
  // DeepSpeed's comms logger is one for the process, whatever group a
  // collective ran on: the communicators split from this one after
  // enable_comms_logger record into the same logger (under its own lock:
  // they are called from different threads), with the job's world size
  // (DeepSpeed's bandwidths use the global one) and rank.
  struct SharedCommsLogger {
    explicit SharedCommsLogger(observability::CommsLoggerConfig config)
        : logger(std::move(config)) {}
    std::mutex mutex;
    observability::CommsLogger logger;
    int64_t world_size = 1;
    int rank = 0;
  };
  std::shared_ptr<SharedCommsLogger> comms_logger_;
  void log_comm(const char* ds_op, const char* op, double latency_ms, uint64_t message_bytes);
};

}  // namespace dscore::comm
