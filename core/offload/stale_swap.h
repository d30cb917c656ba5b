// Swap folders a killed run left behind. NVMe offload writes under
// nvme_path/dscore-job<pid>-<tag>/rank<R>/ and removes it when the engine
// ends; a run killed with SIGKILL, or a lost node, leaves it (tens of GiB
// for a 2.5B model). Each rank therefore records itself in the job folder
// (owner.rank<R>: host, process id and the process's start time) while it
// uses it, and an engine starting NVMe offload removes the job folders
// under its nvme_path whose every owner is a process of this host that is
// gone (no such process, or one started at another time: a reused pid),
// naming each and the bytes freed. A folder with an owner on another host,
// a live owner, or no owner record is left alone: nothing is removed that
// is not known to be dead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::offload {

struct SwapOwner {
  std::string host;
  int64_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat's starttime (clock ticks since boot)
};

// This process as an owner.
SwapOwner this_process();
// Whether `owner` is a process of this host that no longer runs.
bool owner_is_gone(const SwapOwner& owner);

// While it lives, `job_folder`/owner.rank<R> names this process; destroyed,
// it removes that file and the job folder when nothing else is in it. It
// must outlive what writes under the folder.
class SwapFolderLease {
 public:
  static Result<std::unique_ptr<SwapFolderLease>> acquire(const std::string& job_folder, int rank);
  ~SwapFolderLease();
  SwapFolderLease(const SwapFolderLease&) = delete;
  SwapFolderLease& operator=(const SwapFolderLease&) = delete;

 private:
  SwapFolderLease(std::string folder, std::string file)
      : folder_(std::move(folder)), file_(std::move(file)) {}
  std::string folder_;
  std::string file_;
};

struct StaleSwapFolder {
  std::string path;
  int64_t bytes = 0;
  std::string owners;  // "pid 123 on host h (gone)", for the message
};

// The job folders (dscore-job*) directly under `nvme_path` whose owners are
// all gone from this host.
std::vector<StaleSwapFolder> find_stale_swap_folders(const std::string& nvme_path);

// Removes (or with `keep`, only reports) the stale job folders under
// `nvme_path`; one line per folder, for the log. A folder is first renamed
// aside, so of several ranks reclaiming at once only one removes it.
std::vector<std::string> reclaim_stale_swap_folders(const std::string& nvme_path, bool keep);

}  // namespace dscore::offload
