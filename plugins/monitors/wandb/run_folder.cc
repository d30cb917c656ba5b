// Offline run folder creation for run_folder.h.
#include "run_folder.h"

#include <unistd.h>
#include <dscore/cpp/plugin.hpp>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <random>
#include <system_error>

namespace dscore::wandb {
namespace {

namespace fs = std::filesystem;

// wandb names the folder after the local start time (datetime.fromtimestamp).
std::string local_timestamp(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d_%H%M%S", &tm);
  return buf;
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw sdk::Error(ec.value() == EACCES || ec.value() == EROFS ? DSCORE_PERMISSION_DENIED
                                                                 : DSCORE_INVALID_ARGUMENT,
                     "cannot create the wandb run folder '" + dir + "': " + ec.message() +
                         "; set wandb.dir to a writable directory");
}

}  // namespace

std::string new_run_id() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device device;
  std::uniform_int_distribution<size_t> pick(0, sizeof kAlphabet - 2);
  std::string id;
  for (int i = 0; i < 8; ++i) id.push_back(kAlphabet[pick(device)]);
  return id;
}

RunFolder create_run_folder(const sdk::HostRef& host, const std::string& base,
                            const std::string& run_id, double start_time) {
  const fs::path wandb_dir = base.empty() ? fs::path("wandb") : fs::path(base) / "wandb";
  const std::string name = "offline-run-" + local_timestamp(start_time) + "-" + run_id;
  RunFolder folder;
  folder.run_dir = (wandb_dir / name).string();
  folder.run_file = (wandb_dir / name / ("run-" + run_id + ".wandb")).string();
  make_dirs(folder.run_dir);
  make_dirs((wandb_dir / name / "files").string());
  make_dirs((wandb_dir / name / "logs").string());

  // Replace latest-run atomically: a new link under a temporary name, renamed.
  const fs::path link = wandb_dir / "latest-run";
  const fs::path tmp = wandb_dir / (".latest-run." + std::to_string(::getpid()) + "." + run_id);
  std::error_code ec;
  fs::create_directory_symlink(name, tmp, ec);
  if (!ec) fs::rename(tmp, link, ec);
  if (ec) {
    const std::string why = ec.message();
    std::error_code ignored;
    fs::remove(tmp, ignored);
    host.log(DSCORE_LOG_WARNING, "wandb",
             "could not point '" + link.string() + "' at " + name + ": " + why +
                 " (the run itself is complete)");
  }
  return folder;
}

}  // namespace dscore::wandb
