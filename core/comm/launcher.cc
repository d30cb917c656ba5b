#include "core/comm/launcher.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/comm/tcp_kv.h"

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
  // Where rank 0 serves the job's key-value store (job_store.h), unless the
  // user chose: this host and a port free now.
  if (std::getenv("MASTER_ADDR") == nullptr) setenv("MASTER_ADDR", "127.0.0.1", 1);
  if (std::getenv("MASTER_PORT") == nullptr) {
    DSCORE_ASSIGN_OR_RETURN(int port, pick_free_port());
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  }
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT"}) {
    argv.push_back("-x");
    argv.push_back(name);
  }
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
