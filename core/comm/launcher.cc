#include "core/comm/launcher.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace dscore::comm {

Status exec_under_mpirun(int ranks, const std::vector<std::string>& args) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return internal_error("cannot find this executable (/proc/self/exe): " + ec.message());
  const char* env_mpirun = std::getenv("DSCORE_MPIRUN");
  const std::string mpirun = env_mpirun != nullptr && *env_mpirun != '\0' ? env_mpirun : "mpirun";
  std::vector<std::string> argv = {mpirun, "-n", std::to_string(ranks),
                                   // Local ranks may outnumber cores; do not pin them
                                   // (pinned oversubscribed ranks would share one core).
                                   "--oversubscribe", "--bind-to", "none"};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.push_back(self);
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  execvp(c_argv[0], c_argv.data());
  const int err = errno;
  return Status(DSCORE_UNAVAILABLE,
                "-n " + std::to_string(ranks) + ": cannot start " + mpirun + " (" +
                    std::strerror(err) +
                    "); install OpenMPI (apt-get install openmpi-bin) or start the ranks yourself "
                    "with mpirun or srun");
}

}  // namespace dscore::comm
