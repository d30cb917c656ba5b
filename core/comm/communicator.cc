#include "core/comm/communicator.h"

#include <dscore/cpp/dtype.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "core/base/logging.h"
#include "core/plugin_host/host_api.h"
#include "core/plugin_host/params.h"

namespace dscore::comm {
namespace {

// ------------------------------------------------ where a SIGTERM found us

// Set before and after each collective by the thread that runs it (the comm
// thread), read by the handler on whichever thread the signal lands: a
// handler may not lock or allocate, so the fields are lock-free atomics
// under a version that is odd while they change (a seqlock), and the
// handler formats the numbers itself. (A plain char buffer written with
// snprintf here was a data race with the handler; the TSan tests found it.)
struct Where {
  std::atomic<uint64_t> version{0};
  std::atomic<const char*> op{nullptr};  // a string literal; nullptr: no collective in flight
  std::atomic<uint64_t> sequence{0};
  std::atomic<uint64_t> elements{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<const char*>::is_always_lock_free,
              "the SIGTERM handler reads these");
Where g_where;
char g_prefix[48] = "[dscore] ";

void set_where(const char* op, uint64_t sequence, uint64_t elements) {
  g_where.version.fetch_add(1);
  g_where.op.store(op);
  g_where.sequence.store(sequence);
  g_where.elements.store(elements);
  g_where.version.fetch_add(1);
}

// Async-signal-safe: decimal digits of `value` into `out`, returns the end.
char* append_decimal(char* out, uint64_t value) {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

char* append_text(char* out, const char* text) {
  while (*text != '\0') *out++ = *text++;
  return out;
}

void on_sigterm(int signo) {
  // A few tries for a consistent snapshot; the last one is printed anyway.
  const char* op = nullptr;
  uint64_t sequence = 0, elements = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const uint64_t before = g_where.version.load();
    op = g_where.op.load();
    sequence = g_where.sequence.load();
    elements = g_where.elements.load();
    if (before % 2 == 0 && g_where.version.load() == before) break;
  }
  char where[160];
  const char* tail = "computing (no collective in flight)";
  if (op != nullptr) {  // "in <op> #<sequence> (<elements> elements)"; op is at most ~20 chars
    char* end = append_text(append_text(where, "in "), op);
    end = append_decimal(append_text(end, " #"), sequence);
    end = append_text(append_decimal(append_text(end, " ("), elements), " elements)");
    *end = '\0';
    tail = where;
  }
  const char* mid =
      "stopped by SIGTERM: the launcher is ending the job (usually because another rank failed; "
      "see its message above). This rank was ";
  (void)!write(STDERR_FILENO, g_prefix, std::strlen(g_prefix));
  (void)!write(STDERR_FILENO, mid, std::strlen(mid));
  (void)!write(STDERR_FILENO, tail, std::strlen(tail));
  (void)!write(STDERR_FILENO, "\n", 1);
  std::signal(signo, SIG_DFL);
  raise(signo);
}

// ---------------------------------- the table plugins get from the host

Communicator* g_active = nullptr;

CommBuffer buffer_of(const dscore_tensor* t) {
  return t == nullptr ? CommBuffer{} : CommBuffer{t->data, t->dtype, t->numel};
}

// Plugins call these through host->communicator(): the same counted path.
dscore_status forward_status(const Status& status) {
  if (status.ok()) return DSCORE_OK;
  return plugin_host::host_api()->set_error(status.code(), status.message().c_str());
}
dscore_status h_allreduce(dscore_comm*, const dscore_tensor* s, dscore_tensor* r, dscore_reduce_op op,
                          void*) {
  return forward_status(g_active->allreduce(buffer_of(s), buffer_of(r), op));
}
dscore_status h_reduce_scatter(dscore_comm*, const dscore_tensor* s, dscore_tensor* r,
                               dscore_reduce_op op, void*) {
  return forward_status(g_active->reduce_scatter(buffer_of(s), buffer_of(r), op));
}
dscore_status h_allgather(dscore_comm*, const dscore_tensor* s, dscore_tensor* r, void*) {
  return forward_status(g_active->allgather(buffer_of(s), buffer_of(r)));
}
dscore_status h_broadcast(dscore_comm*, dscore_tensor* t, int32_t root, void*) {
  return forward_status(g_active->broadcast(buffer_of(t), root));
}
dscore_status h_barrier(dscore_comm*) { return forward_status(g_active->barrier()); }
dscore_status h_all_to_all(dscore_comm*, const dscore_tensor* s, dscore_tensor* r, void*) {
  return forward_status(g_active->all_to_all(buffer_of(s), buffer_of(r)));
}
dscore_status h_reduce(dscore_comm*, const dscore_tensor* s, dscore_tensor* r, dscore_reduce_op op,
                       int32_t root, void*) {
  return forward_status(g_active->reduce(buffer_of(s), buffer_of(r), op, root));
}
dscore_status h_unsupported_p2p(dscore_comm*, const dscore_tensor*, int32_t, void*) {
  return plugin_host::host_api()->set_error(
      DSCORE_UNIMPLEMENTED, "point-to-point calls are not offered to plugins in this version");
}
dscore_status h_unsupported_recv(dscore_comm*, dscore_tensor*, int32_t, void*) {
  return h_unsupported_p2p(nullptr, nullptr, 0, nullptr);
}

dscore_comm_vtable make_forwarding_vtable() {
  dscore_comm_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.allreduce = &h_allreduce;
  vt.reduce_scatter = &h_reduce_scatter;
  vt.allgather = &h_allgather;
  vt.broadcast = &h_broadcast;
  vt.send = &h_unsupported_p2p;
  vt.recv = &h_unsupported_recv;
  vt.barrier = &h_barrier;
  vt.all_to_all = &h_all_to_all;
  vt.reduce = &h_reduce;
  return vt;
}
const dscore_comm_vtable kForwarding = make_forwarding_vtable();

dscore_tensor view_of(const CommBuffer& b) {
  dscore_tensor t{};
  t.struct_size = sizeof t;
  t.data = b.data;
  t.dtype = b.dtype;
  t.device_type = DSCORE_DEVICE_CPU;
  t.numel = b.numel;
  return t;
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::create(
    const plugin_host::PluginRegistry& registry, const config::CommConfig& config,
    const JobEnv& env, uint64_t seed) {
  const std::string backend =
      config.backend == "auto" ? (env.world_size > 1 ? "mpi" : "local") : config.backend;
  auto info = registry.find(DSCORE_KIND_COMM, backend);
  if (!info.ok()) {
    std::string hint = backend == "mpi" ? " (this dscore was built without MPI, or its plugin "
                                          "failed to load: install OpenMPI (libopenmpi-dev) and "
                                          "rebuild)"
                                        : "";
    return Status(info.status().code(), "comm.backend: " + info.status().message() + hint);
  }
  if (env.world_size > 1 && ((*info)->capabilities & DSCORE_CAP_MULTI_RANK) == 0)
    return invalid_argument("comm.backend \"" + backend + "\" runs one rank, but this job has " +
                            std::to_string(env.world_size) + "; use \"mpi\" or \"auto\"");
  json::Value params = json::Value::object();
  params.set("timeout_ms", config.timeout_ms);
  std::vector<config::ConfigError> errors;
  std::vector<config::ConfigNotice> notices;
  plugin_host::ValidatedParams validated =
      plugin_host::validate_params(**info, params, "comm", config::AutoResolver(), &errors, &notices);
  if (!errors.empty()) return invalid_argument((*info)->display() + ": " + errors.front().message);
  plugin_host::InstanceContext context;
  context.rank = env.rank;
  context.world_size = env.world_size;
  context.local_rank = env.local_rank;
  context.seed = seed;
  DSCORE_ASSIGN_OR_RETURN(auto instance, plugin_host::CommInstance::create(**info, validated, context));
  std::unique_ptr<Communicator> comm(new Communicator(env, std::move(instance)));
  comm->install_host_table();
  if (env.world_size > 1) {
    std::snprintf(g_prefix, sizeof g_prefix, "[dscore rank %d] ", env.rank);
    std::signal(SIGTERM, &on_sigterm);
  }
  return comm;
}

Communicator::Communicator(JobEnv env, std::unique_ptr<plugin_host::CommInstance> instance)
    : env_(std::move(env)), instance_(std::move(instance)) {}

Communicator::~Communicator() {
  if (g_active == this) {
    plugin_host::set_communicator(nullptr);
    g_active = nullptr;
  }
}

void Communicator::install_host_table() {
  g_active = this;
  host_table_.struct_size = sizeof host_table_;
  host_table_.rank = env_.rank;
  host_table_.world_size = env_.world_size;
  host_table_.vtable = &kForwarding;
  host_table_.comm = instance_->handle();
  plugin_host::set_communicator(&host_table_);
}

template <typename Call>
Status Communicator::counted(const char* op, const char* ds_op, uint64_t elements, size_t element_size,
                             uint64_t message_bytes, Call&& call) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sequence_ += 1;
    set_where(op, sequence_, elements);
  }
  const bool profiled = comms_logger_ && comms_logger_->should_profile(ds_op);
  const auto start = std::chrono::steady_clock::now();
  Status status = call();
  const double latency_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mutex_);
  set_where(nullptr, 0, 0);
  OpCounter& c = counters_[op];
  c.calls += 1;
  c.elements += elements;
  c.bytes += elements * element_size;
  if (profiled && status.ok()) {
    auto line = comms_logger_->append(ds_op, comms_logger_->record_name(ds_op, op), latency_ms,
                                      message_bytes, env_.world_size);
    if (line.ok() && !line->empty() && env_.rank == 0) log_info("[Rank 0] " + *line);
  }
  return status;
}

void Communicator::enable_comms_logger(const observability::CommsLoggerConfig& config) {
  std::lock_guard<std::mutex> lock(mutex_);
  comms_logger_ = std::make_unique<observability::CommsLogger>(config);
}

std::string Communicator::comms_summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return comms_logger_ ? comms_logger_->summary() : std::string();
}

Status Communicator::allreduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op) {
  const size_t es = sdk::dtype_size(send.dtype);
  const uint64_t n = static_cast<uint64_t>(send.numel);
  return counted("allreduce", "all_reduce", n, es, n * es, [&] {
    dscore_tensor s = view_of(send), r = view_of(recv);
    return instance_->allreduce(s, r, op, nullptr);
  });
}

Status Communicator::reduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op, int root) {
  const size_t es = sdk::dtype_size(send.dtype);
  const uint64_t n = static_cast<uint64_t>(send.numel);
  return counted("reduce", "reduce", n, es, n * es, [&] {
    dscore_tensor s = view_of(send), r = view_of(recv);
    return instance_->reduce(s, recv.data != nullptr ? &r : nullptr, op, root, nullptr);
  });
}

Status Communicator::reduce_scatter(CommBuffer send, CommBuffer recv, dscore_reduce_op op) {
  const size_t es = sdk::dtype_size(send.dtype);
  const uint64_t n = static_cast<uint64_t>(send.numel);
  return counted("reduce_scatter", "reduce_scatter_tensor", n, es, n * es, [&] {
    dscore_tensor s = view_of(send), r = view_of(recv);
    return instance_->reduce_scatter(s, r, op, nullptr);
  });
}

Status Communicator::allgather(CommBuffer send, CommBuffer recv) {
  const size_t es = sdk::dtype_size(recv.dtype);
  // DeepSpeed's message size is the input tensor (this rank's chunk).
  return counted("allgather", "all_gather_into_tensor", static_cast<uint64_t>(recv.numel), es,
                 static_cast<uint64_t>(send.numel) * es, [&] {
    dscore_tensor s = view_of(send), r = view_of(recv);
    return instance_->allgather(s, r, nullptr);
  });
}

Status Communicator::broadcast(CommBuffer buffer, int root) {
  const size_t es = sdk::dtype_size(buffer.dtype);
  const uint64_t n = static_cast<uint64_t>(buffer.numel);
  return counted("broadcast", "broadcast", n, es, n * es, [&] {
    dscore_tensor t = view_of(buffer);
    return instance_->broadcast(t, root, nullptr);
  });
}

Status Communicator::send(CommBuffer buffer, int peer) {
  const size_t es = sdk::dtype_size(buffer.dtype);
  const uint64_t n = static_cast<uint64_t>(buffer.numel);
  return counted("send", "send", n, es, n * es, [&] { return instance_->send(view_of(buffer), peer, nullptr); });
}

Status Communicator::recv(CommBuffer buffer, int peer) {
  const size_t es = sdk::dtype_size(buffer.dtype);
  const uint64_t n = static_cast<uint64_t>(buffer.numel);
  return counted("recv", "recv", n, es, n * es, [&] {
    dscore_tensor t = view_of(buffer);
    return instance_->recv(t, peer, nullptr);
  });
}

Status Communicator::all_to_all(CommBuffer send, CommBuffer recv) {
  const size_t es = sdk::dtype_size(send.dtype);
  const uint64_t n = static_cast<uint64_t>(send.numel);
  return counted("all_to_all", "all_to_all_single", n, es, n * es, [&] {
    dscore_tensor s = view_of(send), r = view_of(recv);
    return instance_->all_to_all(s, r, nullptr);
  });
}

Status Communicator::barrier() {
  return counted("barrier", "barrier", 0, 0, 0, [&] { return instance_->barrier(); });
}

void Communicator::abort(const std::string& reason) { instance_->abort(reason); }

std::map<std::string, OpCounter> Communicator::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

uint64_t Communicator::total_elements() const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t total = 0;
  for (const auto& [op, c] : counters_) total += c.elements;
  return total;
}

void Communicator::reset_counters() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.clear();
}

Result<dscore_comm_counters> Communicator::wire_counters() const { return instance_->counters(); }

}  // namespace dscore::comm
