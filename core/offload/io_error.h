// The message of a failed swapper transfer: what (reading/writing), where
// (file, byte offset, size), the OS error by text and name, and the fix.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace dscore::offload {

struct IoFailure {
  bool write = false;
  std::string path;
  uint64_t offset = 0;               // of the failed request
  size_t bytes = 0;                  // the request's size
  size_t done = 0;                   // bytes it moved before failing
  dscore_status status = DSCORE_OK;  // the plugin's; OK with done < bytes is a short transfer
  int os_error = 0;
};

Status io_error(const IoFailure& f);
// dscore::io_error(message) stays visible beside it: a call with a message
// from a source that includes this header still means that one.
using dscore::io_error;

// The mount point of the file system holding `path` (its nearest existing
// ancestor's), for "free space on <fs>".
std::string mount_point_of(const std::string& path);

}  // namespace dscore::offload
