#include "core/comm/host_staging.h"

#include <dscore/cpp/dtype.hpp>

#include "core/comm/communicator.h"

namespace dscore::comm {

struct StagedPair::State {
  const HostStaging* staging = nullptr;
  CommBuffer send, recv;
  CommBuffer host_recv;  // where the result goes; data NULL when not staged
  std::shared_ptr<void> send_memory, recv_memory;
};

namespace {

size_t bytes_of(const CommBuffer& b) {
  return static_cast<size_t>(b.numel) * sdk::dtype_size(b.dtype);
}

Result<std::shared_ptr<void>> stage_one(const HostStaging& staging, const CommBuffer& host,
                                        bool copy_in, CommBuffer* staged) {
  DSCORE_ASSIGN_OR_RETURN(std::shared_ptr<void> memory, staging.allocate(bytes_of(host)));
  if (copy_in && bytes_of(host) > 0)
    DSCORE_RETURN_IF_ERROR(staging.copy(memory.get(), host.data, bytes_of(host)));
  *staged = host;
  staged->data = memory.get();
  staged->device_type = staging.device_type;
  staged->device_id = staging.device_id;
  return memory;
}

}  // namespace

bool needs_staging(const HostStaging& staging, const CommBuffer& buffer) {
  return staging.allocate != nullptr && buffer.data != nullptr &&
         buffer.device_type != staging.device_type &&
         (buffer.device_type == DSCORE_DEVICE_CPU || buffer.device_type == DSCORE_DEVICE_CUDA_HOST);
}

Result<StagedPair> StagedPair::stage(const HostStaging& staging, const CommBuffer& send,
                                     const CommBuffer& recv) {
  StagedPair pair;
  pair.state_ = std::make_shared<State>();
  State& s = *pair.state_;
  s.staging = &staging;
  s.send = send;
  s.recv = recv;
  const bool in_place = send.data == recv.data;
  if (needs_staging(staging, send)) {
    DSCORE_ASSIGN_OR_RETURN(s.send_memory, stage_one(staging, send, true, &s.send));
    if (in_place) {
      s.host_recv = recv;
      s.recv = s.send;
      s.recv.numel = recv.numel;
      return pair;
    }
  }
  if (!in_place && needs_staging(staging, recv)) {
    s.host_recv = recv;
    DSCORE_ASSIGN_OR_RETURN(s.recv_memory, stage_one(staging, recv, false, &s.recv));
  }
  return pair;
}

const CommBuffer& StagedPair::send() const { return state_->send; }
const CommBuffer& StagedPair::recv() const { return state_->recv; }

Status StagedPair::finish() {
  State& s = *state_;
  if (s.host_recv.data != nullptr && bytes_of(s.host_recv) > 0)
    return s.staging->copy(s.host_recv.data, s.recv.data, bytes_of(s.host_recv));
  return s.send_memory ? s.staging->wait() : Status::Ok();
}

}  // namespace dscore::comm
