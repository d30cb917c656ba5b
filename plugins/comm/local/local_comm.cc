// The single-rank comm backend "local": every collective of a one-rank job
// is a copy (or nothing, in place). It exists so the engine has one code
// path for every world size; it refuses to run in a multi-rank job.
#include <dscore/comm.h>
#include <dscore/cpp/comm_plugin.hpp>
#include <dscore/cpp/dtype.hpp>

#include <cstring>
#include <string>

namespace dscore::local_comm {
namespace {

using sdk::Error;

void check_pair(const dscore_tensor* send, const dscore_tensor* recv, const char* op) {
  if (send == nullptr || recv == nullptr)
    throw Error(DSCORE_INVALID_ARGUMENT, std::string(op) + ": NULL tensor");
  if (send->dtype != recv->dtype || send->numel != recv->numel)
    throw Error(DSCORE_INVALID_ARGUMENT,
                std::string(op) + ": send and recv differ in dtype or numel (" +
                    std::to_string(send->numel) + " vs " + std::to_string(recv->numel) + ")");
  if (send->device_type != DSCORE_DEVICE_CPU && send->device_type != DSCORE_DEVICE_CUDA_HOST)
    throw Error(DSCORE_INVALID_ARGUMENT,
                std::string(op) + ": the local backend moves CPU tensors only");
}

void check_root(int root, const char* op) {
  if (root != 0)
    throw Error(DSCORE_OUT_OF_RANGE, std::string(op) + ": root must be 0 in a one-rank job");
}

[[noreturn]] void no_peer(int peer, const char* op) {
  throw Error(DSCORE_OUT_OF_RANGE,
              std::string(op) + ": no peer " + std::to_string(peer) + " in a one-rank job");
}

// One rank: the reduction over ranks of `send` is `send` itself (also for
// AVG, the sum divided by 1); every collective is a copy or nothing.
class LocalComm : public sdk::Instance {
 public:
  LocalComm(sdk::HostRef host, const sdk::Params& p) : Instance(host) {
    if (p.args()->world_size != 1)
      throw Error(DSCORE_FAILED_PRECONDITION,
                  "the local backend runs one rank, but this job has " +
                      std::to_string(p.args()->world_size) +
                      " ranks; use \"comm\": {\"backend\": \"mpi\"} (or \"auto\")");
  }
  explicit LocalComm(sdk::HostRef host) : Instance(host) {}

  void allreduce(const dscore_tensor* s, dscore_tensor* r, dscore_reduce_op) {
    copy(s, r, "allreduce");
  }
  void reduce_scatter(const dscore_tensor* s, dscore_tensor* r, dscore_reduce_op) {
    copy(s, r, "reduce_scatter");
  }
  void reduce(const dscore_tensor* s, dscore_tensor* r, dscore_reduce_op, int root) {
    check_root(root, "reduce");
    copy(s, r, "reduce");
  }
  void allgather(const dscore_tensor* s, dscore_tensor* r) { copy(s, r, "allgather"); }
  void all_to_all(const dscore_tensor* s, dscore_tensor* r) { copy(s, r, "all_to_all"); }
  void all_to_all_v(const dscore_tensor* s, dscore_tensor* r, const dscore_all_to_all_layout& l) {
    if (s == nullptr || r == nullptr || s->dtype != r->dtype ||
        l.send_counts[0] != l.recv_counts[0])
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "all_to_all_v: one rank sends itself what it receives (send_counts[0] == "
                  "recv_counts[0], one dtype)");
    const size_t es = sdk::dtype_size(s->dtype);
    std::memmove(static_cast<char*>(r->data) + static_cast<size_t>(l.recv_offsets[0]) * es,
                 static_cast<const char*>(s->data) + static_cast<size_t>(l.send_offsets[0]) * es,
                 static_cast<size_t>(l.send_counts[0]) * es);
    operations_ += 1;
  }
  void broadcast(dscore_tensor*, int root) {
    check_root(root, "broadcast");
    operations_ += 1;
  }
  void send(const dscore_tensor*, int peer) { no_peer(peer, "send"); }
  void recv(dscore_tensor*, int peer) { no_peer(peer, "recv"); }
  void barrier() { operations_ += 1; }
  // A colour makes a new one-rank communicator, NONE makes none.
  LocalComm* split(int32_t color, int32_t) {
    operations_ += 1;
    return color == DSCORE_COMM_SPLIT_NONE ? nullptr : new LocalComm(host());
  }
  void counters(dscore_comm_counters* out) const {
    out->operations = operations_;
    out->bytes_sent = 0;  // nothing leaves the process
    out->bytes_received = 0;
  }

 private:
  void copy(const dscore_tensor* send, dscore_tensor* recv, const char* op) {
    check_pair(send, recv, op);
    if (send->data != recv->data)
      std::memcpy(recv->data, send->data,
                  static_cast<size_t>(send->numel) * sdk::dtype_size(send->dtype));
    operations_ += 1;
  }
  uint64_t operations_ = 0;
};

constexpr const char kParamsSchema[] = R"json({
  "timeout_ms": {"type": "int", "default": 300000, "min": 1,
                 "doc": "collective deadline (no collective waits on a peer here)"}
})json";

const dscore_plugin_descriptor kLocal = sdk::comm_descriptor<LocalComm>(
    "local", "0.1.0", "single-rank backend: collectives are copies", DSCORE_CAP_CPU, kParamsSchema);

}  // namespace
}  // namespace dscore::local_comm

DSCORE_PLUGIN_LIBRARY("dscore-comm-local", "0.1.0", "dscore", &dscore::local_comm::kLocal)
