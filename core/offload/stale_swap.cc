#include "core/offload/stale_swap.h"

#include <unistd.h>

#include <cctype>
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

// /proc/<pid>/stat's start time of a running process; 0 when there is no
// such process or it has ended and not been reaped yet (a zombie: the ranks
// of a killed launcher wait so until init collects them).
uint64_t start_time_of(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  // The command name (field 2) is in parentheses and may hold spaces.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return 0;
    if (i == 22) return std::stoull(field);
  }
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

// "<what>.<host>.<pid>.<start>": a name that says which process made it
// (a lease being made, a folder being reclaimed); parsed from the right,
// as a host name may hold dots.
std::string process_suffix(const SwapOwner& o) {
  return "." + o.host + "." + std::to_string(o.pid) + "." + std::to_string(o.start_time);
}
bool parse_process_suffix(const std::string& name, const std::string& marker, SwapOwner* o) {
  size_t at = name.find(marker);
  if (at == std::string::npos) return false;
  at += marker.size();
  while (at < name.size() && std::isdigit(static_cast<unsigned char>(name[at]))) ++at;  // a rank
  if (at >= name.size() || name[at] != '.') return false;
  const std::string rest = name.substr(at + 1);  // host.pid.start
  const size_t last = rest.rfind('.');
  if (last == std::string::npos || last == 0) return false;
  const size_t middle = rest.rfind('.', last - 1);
  if (middle == std::string::npos || middle == 0) return false;
  try {
    o->host = rest.substr(0, middle);
    o->pid = std::stoll(rest.substr(middle + 1, last - middle - 1));
    o->start_time = std::stoull(rest.substr(last + 1));
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// Writes `text` to `path` whole or not at all (a file beside it, renamed).
bool write_whole(const fs::path& path, const std::string& text) {
  const fs::path aside = path.string() + ".tmp";
  {
    std::ofstream out(aside, std::ios::trunc);
    out << text;
    out.close();
    if (!out) return false;
  }
  std::error_code ec;
  fs::rename(aside, path, ec);
  return !ec;
}

constexpr char kLeaseMarker[] = ".dscore-lease";  // a job folder being made
constexpr char kReclaimMarker[] = ".reclaiming";  // a stale folder being removed

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
  const SwapOwner me = this_process();
  const std::string record = "host " + me.host + "\npid " + std::to_string(me.pid) + "\nstart " +
                             std::to_string(me.start_time) + "\n";
  const std::string name = std::string(kOwnerPrefix) + std::to_string(rank);
  const fs::path job(job_folder);
  std::error_code ec;
  fs::create_directories(job.parent_path(), ec);
  if (ec) return io_error("cannot create the swap folder " + job_folder + ": " + ec.message());
  // A job folder appears with an owner record already in it (made aside,
  // then renamed), so no kill leaves one without; its maker's name marks
  // the aside folder, which a later run removes once that process is gone.
  if (!fs::exists(job, ec)) {
    const fs::path aside =
        job.parent_path() / (std::string(kLeaseMarker) + std::to_string(rank) + process_suffix(me));
    fs::create_directories(aside, ec);
    if (ec) return io_error("cannot create the swap folder " + job_folder + ": " + ec.message());
    if (!write_whole(aside / name, record))
      return io_error("cannot write " + (aside / name).string() +
                      " (the swap folder's owner record)");
    fs::rename(aside, job, ec);
    if (!ec)
      return std::unique_ptr<SwapFolderLease>(
          new SwapFolderLease(job_folder, (job / name).string()));
    fs::remove_all(aside, ec);  // another rank made it first
  }
  if (!write_whole(job / name, record))
    return io_error("cannot write " + (job / name).string() + " (the swap folder's owner record)");
  return std::unique_ptr<SwapFolderLease>(new SwapFolderLease(job_folder, (job / name).string()));
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
    if (!it->is_directory(ec)) continue;
    // Made or being removed by a process of ours that is gone.
    SwapOwner maker;
    if ((name.rfind(kLeaseMarker, 0) == 0 && parse_process_suffix(name, kLeaseMarker, &maker)) ||
        (name.rfind(kJobPrefix, 0) == 0 && parse_process_suffix(name, kReclaimMarker, &maker))) {
      if (owner_is_gone(maker))
        stale.push_back({it->path().string(), bytes_under(it->path()),
                         "pid " + std::to_string(maker.pid) + " on " + maker.host});
      continue;
    }
    if (name.rfind(kJobPrefix, 0) != 0) continue;
    int owners = 0;
    bool all_gone = true;
    std::string said;
    std::error_code inner;
    for (fs::directory_iterator f(it->path(), inner), fend; !inner && f != fend;
         f.increment(inner)) {
      const std::string file = f->path().filename().string();
      if (file.rfind(kOwnerPrefix, 0) != 0 || file.ends_with(".tmp")) continue;
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
    // A job's folder is renamed aside first (marked with this process), so
    // of ranks reclaiming at once one removes it, and a kill midway leaves
    // a folder the next run knows. A folder already marked by a process
    // that is gone is removed where it is.
    const std::string name = fs::path(s.path).filename().string();
    const bool marked =
        name.rfind(kLeaseMarker, 0) == 0 || name.find(kReclaimMarker) != std::string::npos;
    const std::string aside =
        marked ? s.path : s.path + kReclaimMarker + process_suffix(this_process());
    std::error_code ec;
    if (!marked) fs::rename(s.path, aside, ec);
    if (ec) continue;  // another rank took it
    const auto removed = fs::remove_all(aside, ec);
    if (ec)
      lines.push_back("could not remove " + what + ": " + ec.message());
    else if (removed > 0)
      lines.push_back("removed " + what + " freed");
  }
  return lines;
}

}  // namespace dscore::offload
