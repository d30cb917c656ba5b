#include "transfer.h"

#include <errno.h>
#include <unistd.h>

namespace dscore::nvme {

dscore_status status_of_errno(int error) {
  switch (error) {
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
      return DSCORE_RESOURCE_EXHAUSTED;
    case EIO:
    case ENXIO:
    case ENODEV:
      return DSCORE_UNAVAILABLE;
    case EACCES:
    case EPERM:
    case EROFS:
      return DSCORE_PERMISSION_DENIED;
    case EBADF:
    case EINVAL:
    case EFAULT:
      return DSCORE_INVALID_ARGUMENT;
    case ENOENT:
    case ENOTDIR:
      return DSCORE_NOT_FOUND;
    case EFBIG:
    case EOVERFLOW:
      return DSCORE_OUT_OF_RANGE;
    default:
      return DSCORE_INTERNAL;
  }
}

bool advance(Transfer& t, ssize_t result, Completion* out) {
  if (result == -EINTR || result == -EAGAIN) return false;
  out->user_data = t.user_data;
  out->file = t.file;
  if (result < 0) {
    out->status = status_of_errno(static_cast<int>(-result));
    out->os_error = static_cast<int32_t>(-result);
    out->bytes = t.done;
    return true;
  }
  if (result == 0 && t.done < t.bytes) {
    // A read at end of file; a write that makes no progress is a device
    // that stopped taking data.
    out->status = t.op == DSCORE_IO_READ ? DSCORE_DATA_LOSS : DSCORE_UNAVAILABLE;
    out->os_error = t.op == DSCORE_IO_READ ? 0 : EIO;
    out->bytes = t.done;
    return true;
  }
  t.done += static_cast<size_t>(result);
  if (t.done < t.bytes) return false;
  out->status = DSCORE_OK;
  out->os_error = 0;
  out->bytes = t.done;
  return true;
}

Completion run_blocking(Transfer t) {
  Completion c;
  for (;;) {
    const size_t left = t.bytes - t.done;
    const off_t at = static_cast<off_t>(t.offset + t.done);
    ssize_t n = t.op == DSCORE_IO_READ ? ::pread(t.fd, t.buffer + t.done, left, at)
                                       : ::pwrite(t.fd, t.buffer + t.done, left, at);
    if (n < 0) n = -errno;
    if (advance(t, n, &c)) return c;
  }
}

}  // namespace dscore::nvme
