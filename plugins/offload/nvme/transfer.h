// One request of the nvme swapper in progress, and how a result of the OS
// (bytes moved or -errno) advances it: short transfers continue with the
// remainder, EINTR/EAGAIN retry, a read at end of file is DATA_LOSS, and
// errno maps to a status (ENOSPC/EDQUOT: RESOURCE_EXHAUSTED).
#pragma once

#include <dscore/offload.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace dscore::nvme {

struct Transfer {
  dscore_io_op op = DSCORE_IO_READ;
  int fd = -1;
  int64_t file = -1;  // the handle open_file gave out
  uint64_t offset = 0;
  char* buffer = nullptr;
  size_t bytes = 0;
  uint64_t user_data = 0;
  size_t done = 0;       // bytes moved so far
  int fixed_index = -1;  // io_uring registered buffer holding it, or -1
};

struct Completion {
  uint64_t user_data = 0;
  int64_t file = -1;
  dscore_status status = DSCORE_OK;
  size_t bytes = 0;
  int32_t os_error = 0;
};

dscore_status status_of_errno(int error);

// Account `result` (bytes, or -errno) to `t`. True when the transfer ended
// (*out filled); false when the remainder must be issued again.
bool advance(Transfer& t, ssize_t result, Completion* out);

// Run `t` to its end with pread/pwrite (the thread backend).
Completion run_blocking(Transfer t);

}  // namespace dscore::nvme
