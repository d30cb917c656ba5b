#include "core/offload/io_error.h"

#include <errno.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>

namespace dscore::offload {
namespace fs = std::filesystem;

std::string mount_point_of(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(path), ec);
  if (ec) return path;
  struct stat st {};
  while (::stat(p.c_str(), &st) != 0 && p.has_parent_path() && p != p.parent_path())
    p = p.parent_path();
  const dev_t device = st.st_dev;
  while (p.has_parent_path() && p != p.parent_path()) {
    struct stat up {};
    if (::stat(p.parent_path().c_str(), &up) != 0 || up.st_dev != device) break;
    p = p.parent_path();
  }
  return p.string();
}

namespace {

std::string errno_text(int e) {
  if (e == 0) return "";
  const char* name = strerrorname_np(e);
  return std::string(std::strerror(e)) + " (" +
         (name != nullptr ? name : "errno " + std::to_string(e)) + ")";
}

std::string fix_for(const IoFailure& f) {
  const std::string folder = fs::path(f.path).parent_path().string();
  switch (f.os_error) {
    case ENOSPC:
      return "free space on " + mount_point_of(f.path) + " or point nvme_path elsewhere";
    case EDQUOT:
      return "raise the disk quota on " + mount_point_of(f.path) + " or point nvme_path elsewhere";
    case EIO:
      return "the drive reported an I/O error: check it (dmesg, smartctl) or point nvme_path at "
             "another drive";
    case EACCES:
    case EPERM:
    case EROFS:
      return "make " + folder + " writable or point nvme_path elsewhere";
    case EINVAL:
      return "the file system rejected the request (direct I/O alignment?); put nvme_path on a "
             "local ext4 or xfs drive";
    default:
      break;
  }
  if (!f.write && f.os_error == 0)
    return "the file ends before the data asked for: it was not written by this run (or was "
           "truncated); write it before reading it";
  return "check the file system holding " + folder + " or point nvme_path elsewhere";
}

}  // namespace

Status io_error(const IoFailure& f) {
  dscore_status code = f.status;
  if (code == DSCORE_OK) code = DSCORE_DATA_LOSS;  // a short transfer reported as success
  std::string what = std::string(f.write ? "writing " : "reading ") + f.path + " at byte offset " +
                     std::to_string(f.offset) + " (" + std::to_string(f.bytes) + " bytes)";
  std::string why;
  if (f.os_error != 0) {
    why = errno_text(f.os_error);
  } else if (!f.write) {
    why =
        "end of file after " + std::to_string(f.done) + " of " + std::to_string(f.bytes) + " bytes";
  } else {
    why = "short write: " + std::to_string(f.done) + " of " + std::to_string(f.bytes) + " bytes";
  }
  if (f.os_error != 0 && f.done > 0)
    why += " after " + std::to_string(f.done) + " of " + std::to_string(f.bytes) + " bytes";
  return Status(code, "swapper: " + what + " failed: " + why + "; " + fix_for(f));
}

}  // namespace dscore::offload
