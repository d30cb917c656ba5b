// Test support for the nccl comm plugin (device_comm.h).
#include "tests/plugins/comm/nccl/device_comm.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <vector>

#include "core/config/json.h"
#include "core/config/schema.h"
#include "core/plugin_host/params.h"

namespace dscore::testing {
namespace {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status(DSCORE_INTERNAL, std::string(what) + ": " + cudaGetErrorString(e));
}

size_t bytes_of(const CommBuffer& b) {
  return static_cast<size_t>(b.numel) * sdk::dtype_size(b.dtype);
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

Result<std::unique_ptr<plugin_host::CommInstance>> create_nccl(
    const plugin_host::PluginRegistry& registry, const NcclJob& job) {
  DSCORE_ASSIGN_OR_RETURN(const plugin_host::PluginInfo* info,
                          registry.find(DSCORE_KIND_COMM, "nccl"));
  json::Value params = json::Value::object();
  params.set("timeout_ms", job.timeout_ms);
  std::vector<config::ConfigError> errors;
  std::vector<config::ConfigNotice> notices;
  plugin_host::ValidatedParams validated = plugin_host::validate_params(
      *info, params, "comm", config::AutoResolver(), &errors, &notices);
  if (!errors.empty()) return Status(DSCORE_INVALID_ARGUMENT, errors.front().message);
  plugin_host::InstanceContext context;
  context.rank = job.rank;
  context.world_size = job.world_size;
  context.local_rank = job.local_rank;
  context.host = std::make_shared<plugin_host::HostContext>(job.kv);
  return plugin_host::CommInstance::create(*info, validated, context);
}

dscore_tensor cuda_view(const CommBuffer& b, int device) {
  dscore_tensor t{};
  t.struct_size = sizeof t;
  t.data = b.data;
  t.dtype = b.dtype;
  t.device_type = DSCORE_DEVICE_CUDA;
  t.device_id = device;
  t.numel = b.numel;
  return t;
}

DeviceComm::DeviceComm(std::unique_ptr<plugin_host::CommInstance> instance, int rank, int world)
    : instance_(std::move(instance)), rank_(rank), world_(world) {
  cudaGetDevice(&device_);
  cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
}

DeviceComm::~DeviceComm() {
  instance_.reset();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

template <typename Call>
Status DeviceComm::staged(std::initializer_list<CommBuffer*> buffers, Call&& call) {
  // Distinct host ranges, outermost first: a buffer inside another (the
  // own chunk of an in-place allgather) becomes a view into its memory.
  struct Range {
    char* host;
    size_t bytes;
    char* device = nullptr;
  };
  std::vector<Range> ranges;
  for (CommBuffer* b : buffers)
    if (b->data != nullptr) ranges.push_back({static_cast<char*>(b->data), bytes_of(*b)});
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.host != b.host ? a.host < b.host : a.bytes > b.bytes;
  });
  std::vector<Range> owned;
  for (const Range& r : ranges)
    if (owned.empty() || r.host >= owned.back().host + owned.back().bytes) owned.push_back(r);
  Status st;
  for (Range& r : owned) {
    st = cuda_status(cudaMalloc(&r.device, std::max<size_t>(r.bytes, 1)), "cudaMalloc");
    if (st.ok())
      st = cuda_status(cudaMemcpy(r.device, r.host, r.bytes, cudaMemcpyHostToDevice), "upload");
    if (!st.ok()) break;
  }
  std::vector<CommBuffer> device_buffers;
  if (st.ok()) {
    for (CommBuffer* b : buffers) {
      CommBuffer d = *b;
      for (const Range& r : owned)
        if (b->data != nullptr && static_cast<char*>(b->data) >= r.host &&
            static_cast<char*>(b->data) < r.host + std::max<size_t>(r.bytes, 1))
          d.data = r.device + (static_cast<char*>(b->data) - r.host);
      device_buffers.push_back(d);
    }
    st = call(device_buffers);
    if (grouping_) {
      group_calls_ += 1;
      if (!st.ok() && group_error_.ok())
        group_error_ = Status(
            st.code(), "op " + std::to_string(group_calls_) + " in the group: " + st.message());
      // The results exist only after group_end: download (and free) then.
      after_group_.push_back([this, owned, ok = st.ok()] {
        Status down;
        for (const Range& r : owned)
          if (ok && down.ok())
            down = cuda_status(cudaMemcpy(r.host, r.device, r.bytes, cudaMemcpyDeviceToHost),
                               "download");
        for (const Range& r : owned)
          if (r.device != nullptr) cudaFree(r.device);
        return down;
      });
      return st;
    }
    if (st.ok()) st = cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    for (const Range& r : owned)
      if (st.ok())
        st = cuda_status(cudaMemcpy(r.host, r.device, r.bytes, cudaMemcpyDeviceToHost), "download");
  }
  for (const Range& r : owned)
    if (r.device != nullptr) cudaFree(r.device);
  return st;
}

Status DeviceComm::grouped(const std::function<Status()>& issue) {
  DSCORE_RETURN_IF_ERROR(instance_->group_start());
  grouping_ = true;
  group_calls_ = 0;
  group_error_ = Status::Ok();
  Status issued = issue();
  grouping_ = false;
  Status ended = instance_->group_end(stream_);
  if (ended.ok()) ended = cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  for (auto& after : after_group_) {
    const Status down = after();
    if (ended.ok()) ended = down;
  }
  after_group_.clear();
  if (!group_error_.ok()) return group_error_;
  if (!ended.ok()) return ended;
  return issued;
}

Status DeviceComm::allreduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op) {
  return staged({&send, &recv}, [&](std::vector<CommBuffer>& d) {
    dscore_tensor s = cuda_view(d[0], device_), r = cuda_view(d[1], device_);
    return instance_->allreduce(s, r, op, stream_);
  });
}

Status DeviceComm::reduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op, int root) {
  return staged({&send, &recv}, [&](std::vector<CommBuffer>& d) {
    dscore_tensor s = cuda_view(d[0], device_), r = cuda_view(d[1], device_);
    return instance_->reduce(s, rank_ == root ? &r : nullptr, op, root, stream_);
  });
}

Status DeviceComm::reduce_scatter(CommBuffer send, CommBuffer recv, dscore_reduce_op op) {
  return staged({&send, &recv}, [&](std::vector<CommBuffer>& d) {
    dscore_tensor s = cuda_view(d[0], device_), r = cuda_view(d[1], device_);
    return instance_->reduce_scatter(s, r, op, stream_);
  });
}

Status DeviceComm::allgather(CommBuffer send, CommBuffer recv) {
  return staged({&send, &recv}, [&](std::vector<CommBuffer>& d) {
    dscore_tensor s = cuda_view(d[0], device_), r = cuda_view(d[1], device_);
    return instance_->allgather(s, r, stream_);
  });
}

Status DeviceComm::all_to_all_v(CommBuffer send, CommBuffer recv,
                                const comm::Communicator::AllToAllLayout& l) {
  return staged({&send, &recv}, [&](std::vector<CommBuffer>& d) {
    dscore_tensor s = cuda_view(d[0], device_), r = cuda_view(d[1], device_);
    const dscore_all_to_all_layout layout{sizeof(dscore_all_to_all_layout), l.send_counts.data(),
                                          l.send_offsets.data(), l.recv_counts.data(),
                                          l.recv_offsets.data()};
    return instance_->all_to_all_v(s, r, layout, stream_);
  });
}

Status DeviceComm::broadcast(CommBuffer buffer, int root) {
  return staged({&buffer}, [&](std::vector<CommBuffer>& d) {
    dscore_tensor t = cuda_view(d[0], device_);
    return instance_->broadcast(t, root, stream_);
  });
}

Status DeviceComm::send(CommBuffer buffer, int peer) {
  return staged({&buffer}, [&](std::vector<CommBuffer>& d) {
    dscore_tensor t = cuda_view(d[0], device_);
    return instance_->send(t, peer, stream_);
  });
}

Status DeviceComm::recv(CommBuffer buffer, int peer) {
  return staged({&buffer}, [&](std::vector<CommBuffer>& d) {
    dscore_tensor t = cuda_view(d[0], device_);
    return instance_->recv(t, peer, stream_);
  });
}

Status DeviceComm::barrier() { return instance_->barrier(); }

// The group's rank and size follow from every rank's (colour, key), as
// comm::Communicator::split computes them.
Result<std::unique_ptr<CheckedComm>> DeviceComm::split(int color, int key) {
  std::vector<int32_t> mine = {color, key};
  std::vector<int32_t> all(static_cast<size_t>(2 * world_));
  DSCORE_RETURN_IF_ERROR(
      allgather({mine.data(), DSCORE_DTYPE_I32, 2}, {all.data(), DSCORE_DTYPE_I32, 2 * world_}));
  DSCORE_ASSIGN_OR_RETURN(auto group, instance_->split(color, key));
  if (!group) return std::unique_ptr<CheckedComm>();
  int rank = 0, size = 0;
  for (int r = 0; r < world_; ++r) {
    if (all[2 * r] != color) continue;
    size += 1;
    const int32_t k = all[2 * r + 1];
    if (k < key || (k == key && r < rank_)) rank += 1;
  }
  return std::unique_ptr<CheckedComm>(new DeviceComm(std::move(group), rank, size));
}

}  // namespace dscore::testing
