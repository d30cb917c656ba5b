// Test support for the nccl comm plugin: create it through the host's
// plugin registry (plugin_host::CommInstance, the ABI path), and a
// CheckedComm (tests/multirank/collective_checks.h) that stages the checks'
// host buffers in GPU memory around every call, passing a CUDA stream of its
// own and synchronising it afterwards. Ranks in separate processes share
// the job's key-value store at MASTER_ADDR:MASTER_PORT
// (core/comm/job_store.h), as under the engine.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/plugin_host/comm_instance.h"
#include "core/plugin_host/host_context.h"
#include "core/plugin_host/registry.h"
#include "tests/multirank/collective_checks.h"

namespace dscore::testing {

// Whether this process sees a CUDA device, and how many.
int cuda_device_count();

struct NcclJob {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int64_t timeout_ms = 20000;
  std::shared_ptr<plugin_host::KvBackend> kv;  // nullptr: a store of this process
};

// The "nccl" plugin from `registry`, created as `job` says (collective).
Result<std::unique_ptr<plugin_host::CommInstance>> create_nccl(
    const plugin_host::PluginRegistry& registry, const NcclJob& job);

// The checks' calls on a CommInstance, through GPU memory.
class DeviceComm : public CheckedComm {
 public:
  explicit DeviceComm(std::unique_ptr<plugin_host::CommInstance> instance, int rank, int world);
  ~DeviceComm() override;
  plugin_host::CommInstance& instance() { return *instance_; }
  cudaStream_t stream() const { return stream_; }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Status allreduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op) override;
  Status reduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op, int root) override;
  Status reduce_scatter(CommBuffer send, CommBuffer recv, dscore_reduce_op op) override;
  Status allgather(CommBuffer send, CommBuffer recv) override;
  Status broadcast(CommBuffer buffer, int root) override;
  Status send(CommBuffer buffer, int peer) override;
  Status recv(CommBuffer buffer, int peer) override;
  Status barrier() override;
  Status all_to_all_v(CommBuffer send, CommBuffer recv,
                      const comm::Communicator::AllToAllLayout& layout) override;
  Result<dscore_comm_counters> wire_counters() const override { return instance_->counters(); }
  Result<std::unique_ptr<CheckedComm>> split(int color, int key) override;
  // group_start, the calls (their downloads wait for the group), group_end,
  // then the downloads; the first failed call is named with its place.
  Status grouped(const std::function<Status()>& issue) override;

 private:
  // Copy `buffers` to the GPU (a buffer inside another shares its memory,
  // as in-place calls need), run `call` on device views, wait for the
  // stream, copy everything back.
  template <typename Call>
  Status staged(std::initializer_list<CommBuffer*> buffers, Call&& call);

  std::unique_ptr<plugin_host::CommInstance> instance_;
  // Inside grouped(): the calls so far, the first failure, and each call's
  // download-and-free, run after group_end.
  bool grouping_ = false;
  int group_calls_ = 0;
  Status group_error_;
  std::vector<std::function<Status()>> after_group_;
  int rank_, world_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
};

// A dense CUDA tensor view of `b` (already device memory) on `device`.
dscore_tensor cuda_view(const CommBuffer& b, int device);

}  // namespace dscore::testing
