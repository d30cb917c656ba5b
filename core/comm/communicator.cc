#include "core/comm/communicator.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <dscore/cpp/dtype.hpp>

#include "core/base/logging.h"
#include "core/plugin_host/params.h"

namespace dscore::comm {
namespace {

// ---------------------------------- the table plugins get from the host

// The host table's dscore_comm* is the Communicator itself.
Communicator* self_of(dscore_comm* comm) { return reinterpret_cast<Communicator*>(comm); }

CommBuffer buffer_of(const dscore_tensor* t) {
  return t == nullptr ? CommBuffer{} : CommBuffer{t->data, t->dtype, t->numel, t->device_type};
}

// Plugins call these through host->communicator(ctx, group): the same
// counted path; a failure's message goes to the communicator's context.
dscore_status forward_status(Communicator* c, const Status& status) {
  if (status.ok()) return DSCORE_OK;
  return c->host().record_error(status.code(), status.message().c_str());
}
dscore_status h_allreduce(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r,
                          dscore_reduce_op op, void*) {
  return forward_status(self_of(c), self_of(c)->allreduce(buffer_of(s), buffer_of(r), op));
}
dscore_status h_reduce_scatter(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r,
                               dscore_reduce_op op, void*) {
  return forward_status(self_of(c), self_of(c)->reduce_scatter(buffer_of(s), buffer_of(r), op));
}
dscore_status h_allgather(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r, void*) {
  return forward_status(self_of(c), self_of(c)->allgather(buffer_of(s), buffer_of(r)));
}
dscore_status h_broadcast(dscore_comm* c, dscore_tensor* t, int32_t root, void*) {
  return forward_status(self_of(c), self_of(c)->broadcast(buffer_of(t), root));
}
dscore_status h_barrier(dscore_comm* c) {
  return forward_status(self_of(c), self_of(c)->barrier());
}
dscore_status h_all_to_all(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r, void*) {
  return forward_status(self_of(c), self_of(c)->all_to_all(buffer_of(s), buffer_of(r)));
}
dscore_status h_all_to_all_v(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r,
                             const dscore_all_to_all_layout* l, void*) {
  Communicator* self = self_of(c);
  const auto n = static_cast<size_t>(self->world_size());
  if (l == nullptr || l->send_counts == nullptr || l->send_offsets == nullptr ||
      l->recv_counts == nullptr || l->recv_offsets == nullptr)
    return self->host().record_error(DSCORE_INVALID_ARGUMENT,
                                     "all_to_all_v: the layout or one of its arrays is NULL");
  Communicator::AllToAllLayout layout{{l->send_counts, l->send_counts + n},
                                      {l->send_offsets, l->send_offsets + n},
                                      {l->recv_counts, l->recv_counts + n},
                                      {l->recv_offsets, l->recv_offsets + n}};
  return forward_status(self, self->all_to_all_v(buffer_of(s), buffer_of(r), layout));
}
dscore_status h_reduce(dscore_comm* c, const dscore_tensor* s, dscore_tensor* r,
                       dscore_reduce_op op, int32_t root, void*) {
  return forward_status(self_of(c), self_of(c)->reduce(buffer_of(s), buffer_of(r), op, root));
}
dscore_status h_unsupported_p2p(dscore_comm* c, const dscore_tensor*, int32_t, void*) {
  return self_of(c)->host().record_error(
      DSCORE_UNIMPLEMENTED, "point-to-point calls are not offered to plugins in this version");
}
dscore_status h_unsupported_recv(dscore_comm* c, dscore_tensor*, int32_t, void*) {
  return h_unsupported_p2p(c, nullptr, 0, nullptr);
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
  vt.all_to_all_v = &h_all_to_all_v;
  return vt;
}
const dscore_comm_vtable kForwarding = make_forwarding_vtable();

dscore_tensor view_of(const CommBuffer& b) {
  dscore_tensor t{};
  t.struct_size = sizeof t;
  t.data = b.data;
  t.dtype = b.dtype;
  t.device_type = b.device_type;
  t.device_id = b.device_id;
  t.numel = b.numel;
  return t;
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::create(
    const plugin_host::PluginRegistry& registry, const config::CommConfig& config,
    const JobEnv& env, uint64_t seed, std::shared_ptr<plugin_host::HostContext> host) {
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
  plugin_host::ValidatedParams validated = plugin_host::validate_params(
      **info, params, "comm", config::AutoResolver(), &errors, &notices);
  if (!errors.empty()) return invalid_argument((*info)->display() + ": " + errors.front().message);
  plugin_host::InstanceContext context;
  context.rank = env.rank;
  context.world_size = env.world_size;
  context.local_rank = env.local_rank;
  context.seed = seed;
  context.host = std::move(host);
  DSCORE_ASSIGN_OR_RETURN(auto instance,
                          plugin_host::CommInstance::create(**info, validated, context));
  return std::unique_ptr<Communicator>(new Communicator(env, std::move(instance)));
}

Result<std::unique_ptr<Communicator>> Communicator::split(int color, int key) {
  if (color < 0 && color != DSCORE_COMM_SPLIT_NONE)
    return invalid_argument("split: colour " + std::to_string(color) +
                            " must be >= 0 or DSCORE_COMM_SPLIT_NONE");
  // Every rank's (colour, key): the new group's rank and size follow from
  // them by the split rule (key, then rank here), so the host knows them
  // without asking the backend.
  std::vector<int32_t> mine = {color, key};
  std::vector<int32_t> all(static_cast<size_t>(2 * world_size()));
  DSCORE_RETURN_IF_ERROR(
      allgather({mine.data(), DSCORE_DTYPE_I32, 2},
                {all.data(), DSCORE_DTYPE_I32, static_cast<int64_t>(all.size())}));
  DSCORE_ASSIGN_OR_RETURN(auto instance, instance_->split(color, key));
  if (!instance) return std::unique_ptr<Communicator>();
  JobEnv group = env_;
  group.rank = 0;
  group.world_size = 0;
  for (int r = 0; r < world_size(); ++r) {
    if (all[2 * r] != color) continue;
    group.world_size += 1;
    const int32_t k = all[2 * r + 1];
    if (k < key || (k == key && r < rank())) group.rank += 1;
  }
  std::unique_ptr<Communicator> sub(new Communicator(group, std::move(instance)));
  sub->in_flight_ = in_flight_;        // the SIGTERM report sees the groups' calls too
  sub->comms_logger_ = comms_logger_;  // and the comms logger
  return sub;
}

Communicator::Communicator(JobEnv env, std::unique_ptr<plugin_host::CommInstance> instance)
    : env_(std::move(env)), instance_(std::move(instance)) {
  host_table_.struct_size = sizeof host_table_;
  host_table_.rank = env_.rank;
  host_table_.world_size = env_.world_size;
  host_table_.vtable = &kForwarding;
  host_table_.comm = reinterpret_cast<dscore_comm*>(this);
}

Communicator::~Communicator() {
  plugin_host::HostContext& h = host();
  for (dscore_comm_group g : {DSCORE_GROUP_WORLD, DSCORE_GROUP_DATA_PARALLEL})
    if (h.communicator(g) == &host_table_) h.set_communicator(g, nullptr);
}

plugin_host::HostContext& Communicator::host() const { return instance_->host(); }

// A seqlock: the version is odd while the fields change.
void Communicator::record_in_flight(const char* op, uint64_t sequence, uint64_t elements) {
  in_flight_->version.fetch_add(1);
  in_flight_->op.store(op);
  in_flight_->sequence.store(sequence);
  in_flight_->elements.store(elements);
  in_flight_->version.fetch_add(1);
}

Communicator::InFlight Communicator::in_flight() const {
  InFlight out;
  for (int attempt = 0; attempt < 4; ++attempt) {  // a few tries for a consistent snapshot
    const uint64_t before = in_flight_->version.load();
    out.op = in_flight_->op.load();
    out.sequence = in_flight_->sequence.load();
    out.elements = in_flight_->elements.load();
    if (before % 2 == 0 && in_flight_->version.load() == before) break;
  }
  return out;
}

template <typename Call>
Status Communicator::counted(const char* op, const char* ds_op, uint64_t elements,
                             size_t element_size, uint64_t message_bytes, Call&& call) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sequence_ += 1;
    record_in_flight(op, sequence_, elements);
  }
  const bool profiled = comms_logger_ && comms_logger_->logger.should_profile(ds_op);
  const auto start = std::chrono::steady_clock::now();
  Status status = group_.active ? group_call(op, call) : call();
  const double latency_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mutex_);
  record_in_flight(nullptr, 0, 0);
  OpCounter& c = counters_[op];
  c.calls += 1;
  c.elements += elements;
  c.bytes += elements * element_size;
  if (group_.active) group_.elements += elements;
  if (profiled && status.ok() && group_.active && group_.native) {
    // Queued, not done: its latency runs to the end of the group.
    group_.logs.push_back({ds_op, op, message_bytes, start});
  } else if (profiled && status.ok()) {
    log_comm(ds_op, op, latency_ms, message_bytes);
  }
  return status;
}

Status Communicator::group_call(const char* op, const std::function<Status()>& call) {
  if (!group_.first_error.ok()) return group_.first_error;
  group_.calls += 1;
  if (std::strcmp(op, "send") == 0 || std::strcmp(op, "recv") == 0 ||
      std::strcmp(op, "barrier") == 0)
    group_.first_error = failed_precondition(std::string(op) +
                                             " cannot be grouped: make it before or after "
                                             "grouped(), not inside");
  else
    group_.first_error = call();
  if (group_.first_error.ok()) return Status::Ok();
  group_.first_error =
      Status(group_.first_error.code(), std::string(op) + " (op " + std::to_string(group_.calls) +
                                            " in the group): " + group_.first_error.message());
  return group_.first_error;
}

Status Communicator::grouped(const std::function<Status()>& issue) {
  if (group_.active)
    return failed_precondition(
        "grouped() was called inside another group on this communicator; groups do not nest");
  group_ = GroupState{};
  group_.native = instance_->has_groups();
  if (group_.native) DSCORE_RETURN_IF_ERROR(instance_->group_start());
  group_.active = true;
  Status issued = issue();
  group_.active = false;
  Status ended;
  if (group_.native) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sequence_ += 1;
      record_in_flight("group", sequence_, group_.elements);
    }
    ended = instance_->group_end(stream_);
    const auto end = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    record_in_flight(nullptr, 0, 0);
    if (!ended.ok()) {
      ended = Status(ended.code(), "grouped calls (" + std::to_string(group_.calls) +
                                       " collectives) failed at group_end: " + ended.message());
    } else if (comms_logger_) {
      for (const PendingLog& p : group_.logs)
        log_comm(p.ds_op, p.op, std::chrono::duration<double, std::milli>(end - p.start).count(),
                 p.message_bytes);
    }
  }
  GroupState done = std::move(group_);
  group_ = GroupState{};
  if (!done.first_error.ok()) return done.first_error;
  if (!ended.ok()) return ended;
  return issued;
}

void Communicator::enable_comms_logger(const observability::CommsLoggerConfig& config) {
  std::lock_guard<std::mutex> lock(mutex_);
  comms_logger_ = std::make_shared<SharedCommsLogger>(config);
  comms_logger_->world_size = env_.world_size;
  comms_logger_->rank = env_.rank;
}

void Communicator::log_comm(const char* ds_op, const char* op, double latency_ms,
                            uint64_t message_bytes) {
  std::lock_guard<std::mutex> lock(comms_logger_->mutex);
  observability::CommsLogger& logger = comms_logger_->logger;
  auto line = logger.append(ds_op, logger.record_name(ds_op, op), latency_ms, message_bytes,
                            comms_logger_->world_size);
  if (line.ok() && !line->empty() && comms_logger_->rank == 0) log_info("[Rank 0] " + *line);
}

std::string Communicator::comms_summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!comms_logger_) return std::string();
  std::lock_guard<std::mutex> logged(comms_logger_->mutex);
  return comms_logger_->logger.summary();
}

Status Communicator::allreduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op) {
  const size_t es = sdk::dtype_size(send.dtype);
  const uint64_t n = static_cast<uint64_t>(send.numel);
  return counted("allreduce", "all_reduce", n, es, n * es, [&] {
    // One rank reducing in place has nothing to do; a backend may still
    // pass over the buffer (Open MPI did: 187 ms for the 191 MB of a
    // tensor-parallel part's gradients, each step, on its one-rank ZeRO
    // group).
    if (world_size() == 1 && send.data == recv.data) return Status::Ok();
    return with_staging(send, recv, [&](const CommBuffer& sb, const CommBuffer& rb) {
      dscore_tensor s = view_of(sb), r = view_of(rb);
      return instance_->allreduce(s, r, op, stream_);
    });
  });
}

Status Communicator::reduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op, int root) {
  const size_t es = sdk::dtype_size(send.dtype);
  const uint64_t n = static_cast<uint64_t>(send.numel);
  return counted("reduce", "reduce", n, es, n * es, [&] {
    return with_staging(send, recv, [&](const CommBuffer& sb, const CommBuffer& rb) {
      dscore_tensor s = view_of(sb), r = view_of(rb);
      return instance_->reduce(s, rb.data != nullptr ? &r : nullptr, op, root, stream_);
    });
  });
}

Status Communicator::reduce_scatter(CommBuffer send, CommBuffer recv, dscore_reduce_op op) {
  const size_t es = sdk::dtype_size(send.dtype);
  const uint64_t n = static_cast<uint64_t>(send.numel);
  return counted("reduce_scatter", "reduce_scatter_tensor", n, es, n * es, [&] {
    return with_staging(send, recv, [&](const CommBuffer& sb, const CommBuffer& rb) {
      dscore_tensor s = view_of(sb), r = view_of(rb);
      return instance_->reduce_scatter(s, r, op, stream_);
    });
  });
}

Status Communicator::allgather(CommBuffer send, CommBuffer recv) {
  const size_t es = sdk::dtype_size(recv.dtype);
  // DeepSpeed's message size is the input tensor (this rank's chunk).
  return counted("allgather", "all_gather_into_tensor", static_cast<uint64_t>(recv.numel), es,
                 static_cast<uint64_t>(send.numel) * es, [&] {
                   return with_staging(send, recv, [&](const CommBuffer& sb, const CommBuffer& rb) {
                     dscore_tensor s = view_of(sb), r = view_of(rb);
                     return instance_->allgather(s, r, stream_);
                   });
                 });
}

Status Communicator::broadcast(CommBuffer buffer, int root) {
  const size_t es = sdk::dtype_size(buffer.dtype);
  const uint64_t n = static_cast<uint64_t>(buffer.numel);
  return counted("broadcast", "broadcast", n, es, n * es, [&] {
    return with_staging(buffer, buffer, [&](const CommBuffer& b, const CommBuffer&) {
      dscore_tensor t = view_of(b);
      return instance_->broadcast(t, root, stream_);
    });
  });
}

Status Communicator::with_staging(
    const CommBuffer& send, const CommBuffer& recv,
    const std::function<Status(const CommBuffer&, const CommBuffer&)>& call) {
  if (!needs_staging(staging_, send) && !needs_staging(staging_, recv)) return call(send, recv);
  if (group_.active)
    return failed_precondition(
        "a grouped collective has a host buffer, but backend '" + backend() +
        "' moves device memory only: group device buffers, or make the call outside the group");
  DSCORE_ASSIGN_OR_RETURN(StagedPair staged, StagedPair::stage(staging_, send, recv));
  DSCORE_RETURN_IF_ERROR(call(staged.send(), staged.recv()));
  return staged.finish();
}

Status Communicator::send(CommBuffer buffer, int peer) {
  const size_t es = sdk::dtype_size(buffer.dtype);
  const uint64_t n = static_cast<uint64_t>(buffer.numel);
  return counted("send", "send", n, es, n * es, [&] {
    return with_staging(buffer, CommBuffer{}, [&](const CommBuffer& b, const CommBuffer&) {
      return instance_->send(view_of(b), peer, stream_);
    });
  });
}

Status Communicator::recv(CommBuffer buffer, int peer) {
  const size_t es = sdk::dtype_size(buffer.dtype);
  const uint64_t n = static_cast<uint64_t>(buffer.numel);
  return counted("recv", "recv", n, es, n * es, [&] {
    return with_staging(CommBuffer{}, buffer, [&](const CommBuffer&, const CommBuffer& b) {
      dscore_tensor t = view_of(b);
      return instance_->recv(t, peer, stream_);
    });
  });
}

Status Communicator::all_to_all(CommBuffer send, CommBuffer recv) {
  const size_t es = sdk::dtype_size(send.dtype);
  const uint64_t n = static_cast<uint64_t>(send.numel);
  return counted("all_to_all", "all_to_all_single", n, es, n * es, [&] {
    return with_staging(send, recv, [&](const CommBuffer& sb, const CommBuffer& rb) {
      dscore_tensor s = view_of(sb), r = view_of(rb);
      return instance_->all_to_all(s, r, stream_);
    });
  });
}

Status Communicator::all_to_all_v(CommBuffer send, CommBuffer recv, const AllToAllLayout& layout) {
  const auto n = static_cast<size_t>(world_size());
  if (layout.send_counts.size() != n || layout.send_offsets.size() != n ||
      layout.recv_counts.size() != n || layout.recv_offsets.size() != n)
    return invalid_argument("all_to_all_v: the layout needs " + std::to_string(n) +
                            " counts and offsets each way (one per rank)");
  for (size_t j = 0; j < n; ++j) {
    if (layout.send_counts[j] < 0 || layout.send_offsets[j] < 0 ||
        layout.send_offsets[j] + layout.send_counts[j] > send.numel || layout.recv_counts[j] < 0 ||
        layout.recv_offsets[j] < 0 || layout.recv_offsets[j] + layout.recv_counts[j] > recv.numel)
      return invalid_argument("all_to_all_v: rank " + std::to_string(j) +
                              "'s counts and offsets reach outside the send (" +
                              std::to_string(send.numel) + ") or recv (" +
                              std::to_string(recv.numel) + ") elements");
  }
  const size_t es = sdk::dtype_size(send.dtype);
  uint64_t sent = 0;
  for (int64_t c : layout.send_counts) sent += static_cast<uint64_t>(c);
  return counted("all_to_all_v", "all_to_all_single", sent, es, sent * es, [&] {
    return with_staging(send, recv, [&](const CommBuffer& sb, const CommBuffer& rb) {
      dscore_tensor s = view_of(sb), r = view_of(rb);
      const dscore_all_to_all_layout l{sizeof(dscore_all_to_all_layout), layout.send_counts.data(),
                                       layout.send_offsets.data(), layout.recv_counts.data(),
                                       layout.recv_offsets.data()};
      return instance_->all_to_all_v(s, r, l, stream_);
    });
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
