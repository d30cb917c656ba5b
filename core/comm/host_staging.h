// Host buffers for a comm backend that moves device memory only (nccl):
// the engine computing on a GPU installs a HostStaging for its device
// (Communicator::stage_host_buffers), and the communicator then copies each
// host buffer of a collective into device memory before the call and the
// result back after it. The ZeRO buffers are device memory already; what
// goes through here is the job's small control traffic (agreements, the
// checkpoint's gathers, the job broadcast) and gathers into host memory.
#pragma once

#include <dscore/plugin.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "core/base/status.h"

namespace dscore::comm {

struct CommBuffer;

struct HostStaging {
  dscore_device_type device_type = DSCORE_DEVICE_CPU;  // what staged buffers are typed as
  int32_t device_id = 0;
  // `bytes` bytes of device memory, freed when the last owner drops it.
  std::function<Result<std::shared_ptr<void>>(size_t bytes)> allocate;
  // A copy between host and device memory, complete when it returns (in
  // order with the collectives of the communicator's stream).
  std::function<Status(void* dst, const void* src, size_t bytes)> copy;
  // Blocks until the collectives queued so far have completed (the staged
  // memory of a send buffer may go then).
  std::function<Status()> wait;
};

// A collective's send and recv buffers as the backend gets them: each host
// buffer replaced by staged device memory (a send buffer's contents copied
// in; a buffer that is both, an in-place collective's, staged once).
class StagedPair {
 public:
  // Stages the host buffers among send and recv (a recv with data NULL,
  // a non-root's reduce, stays as it is).
  static Result<StagedPair> stage(const HostStaging& staging, const CommBuffer& send,
                                  const CommBuffer& recv);
  const CommBuffer& send() const;
  const CommBuffer& recv() const;
  // After the collective: the staged result back into the host recv buffer,
  // or, with only a send buffer staged, a wait for the collective to end.
  Status finish();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Whether a buffer is host memory that `staging` must stage.
bool needs_staging(const HostStaging& staging, const CommBuffer& buffer);

}  // namespace dscore::comm
