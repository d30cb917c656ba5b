// The single-rank comm backend "local": every collective of a one-rank job
// is a copy (or nothing, in place). It exists so the engine has one code
// path for every world size; it refuses to run in a multi-rank job.
#include <dscore/comm.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/instance.hpp>

#include <cstring>
#include <string>

namespace dscore::local_comm {
namespace {

using sdk::Error;

struct LocalComm : sdk::Instance {
  LocalComm(sdk::HostRef host, const sdk::Params&) : Instance(host) {}
  explicit LocalComm(sdk::HostRef host) : Instance(host) {}
  uint64_t operations = 0;
};
using S = sdk::Shim<dscore_comm, LocalComm>;

size_t bytes_of(const dscore_tensor* t) {
  return static_cast<size_t>(t->numel) * sdk::dtype_size(t->dtype);
}

void check_pair(const dscore_tensor* send, const dscore_tensor* recv, const char* op) {
  if (send == nullptr || recv == nullptr)
    throw Error(DSCORE_INVALID_ARGUMENT, std::string(op) + ": NULL tensor");
  if (send->dtype != recv->dtype || send->numel != recv->numel)
    throw Error(DSCORE_INVALID_ARGUMENT,
                std::string(op) + ": send and recv differ in dtype or numel (" +
                    std::to_string(send->numel) + " vs " + std::to_string(recv->numel) + ")");
  if (send->device_type != DSCORE_DEVICE_CPU && send->device_type != DSCORE_DEVICE_CUDA_HOST)
    throw Error(DSCORE_INVALID_ARGUMENT, std::string(op) + ": the local backend moves CPU tensors only");
}

// One rank: the reduction over ranks of `send` is `send` itself (also for
// AVG, the sum divided by 1).
dscore_status copy_op(dscore_comm* c, const dscore_tensor* send, dscore_tensor* recv, const char* op) {
  return S::call(c, [&](LocalComm& self) {
    check_pair(send, recv, op);
    if (send->data != recv->data) std::memcpy(recv->data, send->data, bytes_of(send));
    self.operations += 1;
  });
}

dscore_status create(const dscore_create_args* args, dscore_comm** out) {
  if (args != nullptr && args->world_size != 1)
    return sdk::HostRef(args).report(
        DSCORE_FAILED_PRECONDITION,
        ("the local backend runs one rank, but this job has " + std::to_string(args->world_size) +
         " ranks; use \"comm\": {\"backend\": \"mpi\"} (or \"auto\")")
            .c_str());
  return S::create(args, out);
}

dscore_status allreduce(dscore_comm* c, const dscore_tensor* send, dscore_tensor* recv,
                        dscore_reduce_op, void*) {
  return copy_op(c, send, recv, "allreduce");
}
dscore_status reduce_scatter(dscore_comm* c, const dscore_tensor* send, dscore_tensor* recv,
                             dscore_reduce_op, void*) {
  return copy_op(c, send, recv, "reduce_scatter");
}
dscore_status allgather(dscore_comm* c, const dscore_tensor* send, dscore_tensor* recv, void*) {
  return copy_op(c, send, recv, "allgather");
}
dscore_status all_to_all(dscore_comm* c, const dscore_tensor* send, dscore_tensor* recv, void*) {
  return copy_op(c, send, recv, "all_to_all");
}
dscore_status reduce(dscore_comm* c, const dscore_tensor* send, dscore_tensor* recv,
                     dscore_reduce_op, int32_t root, void*) {
  if (root != 0) return S::self(c).host().report(DSCORE_OUT_OF_RANGE, "reduce: root must be 0 in a one-rank job");
  return copy_op(c, send, recv, "reduce");
}
dscore_status broadcast(dscore_comm* c, dscore_tensor*, int32_t root, void*) {
  if (root != 0)
    return S::self(c).host().report(DSCORE_OUT_OF_RANGE, "broadcast: root must be 0 in a one-rank job");
  S::self(c).operations += 1;
  return DSCORE_OK;
}
dscore_status send(dscore_comm* c, const dscore_tensor*, int32_t peer, void*) {
  return S::self(c).host().report(DSCORE_OUT_OF_RANGE,
                                  ("send: no peer " + std::to_string(peer) + " in a one-rank job").c_str());
}
dscore_status recv(dscore_comm* c, dscore_tensor*, int32_t peer, void*) {
  return S::self(c).host().report(DSCORE_OUT_OF_RANGE,
                                  ("recv: no peer " + std::to_string(peer) + " in a one-rank job").c_str());
}
dscore_status barrier(dscore_comm* c) {
  S::self(c).operations += 1;
  return DSCORE_OK;
}
// One rank: a colour makes a new one-rank communicator, NONE makes none.
dscore_status split(dscore_comm* c, int32_t color, int32_t, dscore_comm** out) {
  return S::call(c, [&](LocalComm& self) {
    self.operations += 1;
    *out = color == DSCORE_COMM_SPLIT_NONE ? nullptr
                                           : reinterpret_cast<dscore_comm*>(new LocalComm(self.host()));
  });
}
dscore_status counters(const dscore_comm* c, dscore_comm_counters* out) {
  out->operations = S::self(c).operations;
  out->bytes_sent = 0;  // nothing leaves the process
  out->bytes_received = 0;
  return DSCORE_OK;
}

dscore_comm_vtable make_vtable() {
  dscore_comm_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.create = &create;
  vt.destroy = &S::destroy;
  vt.allreduce = &allreduce;
  vt.reduce_scatter = &reduce_scatter;
  vt.allgather = &allgather;
  vt.broadcast = &broadcast;
  vt.send = &send;
  vt.recv = &recv;
  vt.barrier = &barrier;
  vt.all_to_all = &all_to_all;
  vt.reduce = &reduce;
  vt.counters = &counters;
  vt.split = &split;
  return vt;
}
const dscore_comm_vtable kVtable = make_vtable();

constexpr const char kParamsSchema[] = R"json({
  "timeout_ms": {"type": "int", "default": 300000, "min": 1,
                 "doc": "collective deadline (no collective waits on a peer here)"}
})json";

const dscore_plugin_descriptor kLocal = {
    sizeof(dscore_plugin_descriptor), DSCORE_KIND_COMM, "local", "0.1.0",
    "single-rank backend: collectives are copies", DSCORE_CAP_CPU, kParamsSchema, &kVtable};
const dscore_plugin_descriptor* const kPlugins[] = {&kLocal};
const dscore_plugin_library kLibrary = sdk::plugin_library("dscore-comm-local", "0.1.0", "dscore", kPlugins);

}  // namespace
}  // namespace dscore::local_comm

DSCORE_PLUGIN_ENTRY(dscore::local_comm::kLibrary)
