#include "core/comm/launcher.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/comm/tcp_kv.h"

extern char** environ;

namespace dscore::comm {
namespace {

constexpr int kDeepSpeedMasterPort = 29500;
constexpr const char* kTokenName = "DSCORE_JOB_TOKEN";

// The job's secret for its key-value store (tcp_kv.h): the caller's
// DSCORE_JOB_TOKEN, else 128 random bits.
std::string job_token() {
  const char* given = std::getenv(kTokenName);
  if (given != nullptr && *given != '\0') return given;
  std::random_device random;
  char text[33];
  std::snprintf(text, sizeof text, "%08x%08x%08x%08x", random(), random(), random(), random());
  return text;
}

Result<std::string> this_executable() {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return internal_error("cannot find this executable (/proc/self/exe): " + ec.message());
  return self;
}

std::string mpirun_program() {
  const char* env = std::getenv("DSCORE_MPIRUN");
  return env != nullptr && *env != '\0' ? env : "mpirun";
}

// The caller's settings every rank must see: DSCORE_* and OMP_NUM_THREADS
// (mpirun passes only what -x names to other hosts).
std::vector<std::string> passed_variables() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if ((name.rfind("DSCORE_", 0) == 0 && name != kTokenName) || name == "OMP_NUM_THREADS")
      names.push_back(name);
  }
  return names;
}

bool is_local(const std::string& host) {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return host == "localhost" || host == "127.0.0.1" || host == name;
}

std::string quoted(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-./:=,@%+") == std::string::npos)
    return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Result<LaunchCommand> local_launch(int ranks, const std::vector<std::string>& args) {
  DSCORE_ASSIGN_OR_RETURN(std::string self, this_executable());
  LaunchCommand c;
  c.launcher = "openmpi";
  c.argv = {mpirun_program(), "-n", std::to_string(ranks),
            // Local ranks may outnumber cores; do not pin them
            // (pinned oversubscribed ranks would share one core).
            "--oversubscribe", "--bind-to", "none"};
  if (geteuid() == 0) c.argv.push_back("--allow-run-as-root");
  const char* addr = std::getenv("MASTER_ADDR");
  c.env.push_back({"MASTER_ADDR", addr != nullptr ? addr : "127.0.0.1"});
  if (const char* port = std::getenv("MASTER_PORT"); port != nullptr) {
    c.env.push_back({"MASTER_PORT", port});
  } else {
    DSCORE_ASSIGN_OR_RETURN(int free_port, pick_free_port());
    c.env.push_back({"MASTER_PORT", std::to_string(free_port)});
  }
  c.env.push_back({kTokenName, job_token()});
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", kTokenName})
    c.argv.insert(c.argv.end(), {"-x", name});
  c.argv.push_back(self);
  c.argv.insert(c.argv.end(), args.begin(), args.end());
  return c;
}

Status exec_under_mpirun(int ranks, const std::vector<std::string>& args) {
  DSCORE_ASSIGN_OR_RETURN(LaunchCommand command, local_launch(ranks, args));
  const Status failed = exec_launch(command);
  return Status(failed.code(), "-n " + std::to_string(ranks) + ": " + failed.message());
}

Result<LaunchCommand> host_launch(const HostLaunch& launch) {
  if (launch.hosts.empty()) return invalid_argument("no hosts to launch on");
  const bool in_slurm = std::getenv("SLURM_JOB_ID") != nullptr;
  std::string launcher = launch.launcher;
  if (launcher == "auto") launcher = in_slurm ? "slurm" : "openmpi";
  if (launcher == "ssh" || launcher == "pdsh" || launcher == "mvapich" || launcher == "impi" ||
      launcher == "mpich")
    return unimplemented(
        "--launcher " + launcher +
        " is not offered: dscore starts ranks through openmpi (mpirun reaches other hosts "
        "over ssh itself) or slurm (srun); use --launcher openmpi");
  if (launcher != "openmpi" && launcher != "slurm")
    return invalid_argument("--launcher " + launcher + ": use auto, openmpi or slurm");
  if (launcher == "slurm" && !in_slurm)
    return failed_precondition(
        "--launcher slurm runs srun inside a Slurm allocation (SLURM_JOB_ID is not set): start "
        "the job with salloc or sbatch, or use --launcher openmpi");
  // Ranks are placed by count: a slot list must be each host's first slots.
  int total = 0;
  for (const HostSlots& h : launch.hosts) {
    for (size_t i = 0; i < h.slots.size(); ++i)
      if (h.slots[i] != static_cast<int>(i))
        return unimplemented("host " + h.host + " keeps slots that are not its first " +
                             std::to_string(h.slots.size()) + ": " + launcher +
                             " places ranks by count per host, not by slot index; include whole "
                             "hosts or use --num_gpus");
    total += static_cast<int>(h.slots.size());
  }
  DSCORE_ASSIGN_OR_RETURN(std::string self, this_executable());
  LaunchCommand c;
  c.launcher = launcher;
  const std::string addr =
      launch.master_addr.empty() ? launch.hosts.front().host : launch.master_addr;
  int port = launch.master_port;
  if (port == 0) {
    if (const char* env = std::getenv("MASTER_PORT"); env != nullptr && *env != '\0') {
      port = std::atoi(env);
    } else if (is_local(addr)) {
      DSCORE_ASSIGN_OR_RETURN(port, pick_free_port());
    } else {
      port = kDeepSpeedMasterPort;
    }
  }
  c.env = {{"MASTER_ADDR", addr}, {"MASTER_PORT", std::to_string(port)}, {kTokenName, job_token()}};
  if (launcher == "openmpi") {
    std::string hosts;
    for (const HostSlots& h : launch.hosts)
      hosts += (hosts.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots.size());
    c.argv = {mpirun_program(), "-n", std::to_string(total), "--host", hosts, "--bind-to", "none"};
    if (geteuid() == 0) c.argv.push_back("--allow-run-as-root");
    std::vector<std::string> names = {"MASTER_ADDR", "MASTER_PORT", kTokenName};
    for (const std::string& n : passed_variables()) names.push_back(n);
    for (const std::string& n : names) c.argv.insert(c.argv.end(), {"-x", n});
  } else {
    const size_t per_node = launch.hosts.front().slots.size();
    std::string nodes;
    for (const HostSlots& h : launch.hosts) {
      if (h.slots.size() != per_node)
        return unimplemented("srun starts the same number of tasks on every node; host " + h.host +
                             " keeps " + std::to_string(h.slots.size()) + " slots, host " +
                             launch.hosts.front().host + " " + std::to_string(per_node) +
                             ": give every host the same count (--num_gpus)");
      nodes += (nodes.empty() ? "" : ",") + h.host;
    }
    c.argv = {"srun",
              "--nodes=" + std::to_string(launch.hosts.size()),
              "--ntasks=" + std::to_string(total),
              "--ntasks-per-node=" + std::to_string(per_node),
              "--nodelist=" + nodes,
              "--export=ALL"};
  }
  c.argv.push_back(self);
  c.argv.insert(c.argv.end(), launch.args.begin(), launch.args.end());
  return c;
}

std::string shell_line(const LaunchCommand& command) {
  std::string line;
  for (const auto& [name, value] : command.env)  // the token is a secret: not printed
    line += name + "=" + (name == kTokenName ? std::string("<secret>") : quoted(value)) + " ";
  for (size_t i = 0; i < command.argv.size(); ++i) line += (i ? " " : "") + quoted(command.argv[i]);
  return line;
}

Status exec_launch(const LaunchCommand& command) {
  for (const auto& [name, value] : command.env) setenv(name.c_str(), value.c_str(), 1);
  std::vector<std::string> argv = command.argv;
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  execvp(c_argv[0], c_argv.data());
  const int err = errno;
  return Status(DSCORE_UNAVAILABLE,
                "cannot start " + command.argv[0] + " (" + std::strerror(err) + "); " +
                    (command.launcher == "slurm"
                         ? std::string("srun comes with Slurm: run inside an allocation")
                         : std::string("install OpenMPI (apt-get install openmpi-bin) or start "
                                       "the ranks yourself with mpirun or srun")));
}

}  // namespace dscore::comm
