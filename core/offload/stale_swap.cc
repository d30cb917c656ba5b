#include "core/offload/stale_swap.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/base/strings.h"

namespace dscore::offload {
namespace fs = std::filesystem;
namespace {

constexpr char kJobPrefix[] = "dscore-job";
constexpr char kOwnerPrefix[] = "owner.rank";

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

// Field 22 of /proc/<pid>/stat; 0 when the process does not exist.
uint64_t start_time_of(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  // The command name (field 2) is in parentheses and may hold spaces.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i)
    if (i == 22) return std::stoull(field);
  return 0;
}

bool read_owner(const fs::path& file, SwapOwner* owner) {
  std::ifstream in(file);
  std::string key;
  bool host = false, pid = false, start = false;
  while (in >> key) {
    if (key == "host") host = static_cast<bool>(in >> owner->host);
    if (key == "pid") pid = static_cast<bool>(in >> owner->pid);
    if (key == "start") start = static_cast<bool>(in >> owner->start_time);
  }
  return host && pid && start;
}

int64_t bytes_under(const fs::path& folder) {
  int64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) total += static_cast<int64_t>(it->file_size(ec));
  return total;
}

}  // namespace

SwapOwner this_process() {
  SwapOwner owner;
  owner.host = host_name();
  owner.pid = static_cast<int64_t>(::getpid());
  owner.start_time = start_time_of(owner.pid);
  return owner;
}

bool owner_is_gone(const SwapOwner& owner) {
  if (owner.host != host_name()) return false;
  const uint64_t start = start_time_of(owner.pid);
  return start == 0 || start != owner.start_time;
}

Result<std::unique_ptr<SwapFolderLease>> SwapFolderLease::acquire(const std::string& job_folder,
                                                                  int rank) {
  std::error_code ec;
  fs::create_directories(job_folder, ec);
  if (ec) return io_error("cannot create the swap folder " + job_folder + ": " + ec.message());
  const SwapOwner me = this_process();
  const std::string file = job_folder + "/" + kOwnerPrefix + std::to_string(rank);
  std::ofstream out(file, std::ios::trunc);
  out << "host " << me.host << "\npid " << me.pid << "\nstart " << me.start_time << "\n";
  out.close();
  if (!out) return io_error("cannot write " + file + " (the swap folder's owner record)");
  return std::unique_ptr<SwapFolderLease>(new SwapFolderLease(job_folder, file));
}

SwapFolderLease::~SwapFolderLease() {
  std::error_code ec;
  fs::remove(file_, ec);
  fs::remove(folder_, ec);  // only when empty: other ranks may still use it
}

std::vector<StaleSwapFolder> find_stale_swap_folders(const std::string& nvme_path) {
  std::vector<StaleSwapFolder> stale;
  std::error_code ec;
  for (fs::directory_iterator it(nvme_path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_directory(ec) || name.rfind(kJobPrefix, 0) != 0) continue;
    int owners = 0;
    bool all_gone = true;
    std::string said;
    std::error_code inner;
    for (fs::directory_iterator f(it->path(), inner), fend; !inner && f != fend;
         f.increment(inner)) {
      if (f->path().filename().string().rfind(kOwnerPrefix, 0) != 0) continue;
      SwapOwner owner;
      if (!read_owner(f->path(), &owner) || !owner_is_gone(owner)) {
        all_gone = false;
        break;
      }
      ++owners;
      if (said.find("pid " + std::to_string(owner.pid) + " ") == std::string::npos)
        said += (said.empty() ? "" : ", ") + std::string("pid ") + std::to_string(owner.pid) +
                " on " + owner.host;
    }
    if (owners == 0 || !all_gone || inner) continue;
    stale.push_back({it->path().string(), bytes_under(it->path()), said});
  }
  return stale;
}

std::vector<std::string> reclaim_stale_swap_folders(const std::string& nvme_path, bool keep) {
  std::vector<std::string> lines;
  for (const StaleSwapFolder& s : find_stale_swap_folders(nvme_path)) {
    const std::string what = "swap folder " + s.path + " of a job that is gone (" + s.owners +
                             "), " + format_bytes(static_cast<uint64_t>(s.bytes));
    if (keep) {
      lines.push_back("kept " + what +
                      " (\"aio\": {\"keep_stale\": true}); remove it to free the "
                      "space");
      continue;
    }
    // Renamed aside first: of ranks reclaiming at once, one wins.
    const std::string aside = s.path + ".reclaiming." + std::to_string(::getpid());
    std::error_code ec;
    fs::rename(s.path, aside, ec);
    if (ec) continue;  // another rank took it
    fs::remove_all(aside, ec);
    lines.push_back(ec ? "could not remove " + what + ": " + ec.message()
                       : "removed " + what + " freed");
  }
  return lines;
}

}  // namespace dscore::offload
