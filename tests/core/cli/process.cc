// Child processes for tests: fork + execve with two pipes drained by poll()
// (so a child that fills one pipe while the test reads the other cannot
// deadlock), a deadline, and waitpid for the exit status or signal. Each
// child leads its own session, so the processes it starts (mpirun's ranks,
// which get process groups of their own) can be found after a kill.
#include "tests/core/cli/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdlib>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace dscore::testing {
namespace fs = std::filesystem;

namespace {

std::vector<std::string> merged_environment(const EnvOverrides& overrides) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : overrides) {
    if (value)
      env[name] = *value;
    else
      env.erase(name);
  }
  std::vector<std::string> out;
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The live processes of session `sid` (zombies have ended: not counted).
std::vector<pid_t> session_members(pid_t sid) {
  std::vector<pid_t> members;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(it->path() / "stat");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(text.substr(close + 2));
    std::string state, ppid, pgrp, session;
    if (!(fields >> state >> ppid >> pgrp >> session)) continue;
    if (state != "Z" && state != "X" && std::stol(session) == sid)
      members.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return members;
}

// After a timeout: waits up to `grace` for the session's other processes
// to end; true if some outlived it (they are then killed).
bool session_outlived(pid_t sid, std::chrono::milliseconds grace) {
  const auto until = std::chrono::steady_clock::now() + grace;
  while (!session_members(sid).empty()) {
    if (std::chrono::steady_clock::now() >= until) {
      for (pid_t member : session_members(sid)) kill(member, SIGKILL);
      return true;
    }
    usleep(10000);
  }
  return false;
}

}  // namespace

std::string ProcessResult::describe() const {
  std::string how = timed_out     ? "timed out"
                    : signal != 0 ? "killed by signal " + std::to_string(signal)
                                  : "exit " + std::to_string(exit_code);
  return how + "\n--- stdout:\n" + out + "\n--- stderr:\n" + err;
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  if (argv.empty()) throw std::invalid_argument("run_process: empty argv");
  // Open MPI 4's mpirun makes its session folder <tmp>/ompi.<host>.<uid>
  // with a check-then-mkdir that fails ("File exists") when two mpiruns
  // start at once, as ctest -j starts them: each child gets its own base.
  EnvOverrides overrides = options.env;
  std::string session_base;
  if (!overrides.count("OMPI_MCA_orte_tmpdir_base") &&
      std::getenv("OMPI_MCA_orte_tmpdir_base") == nullptr) {
    std::string pattern = (fs::temp_directory_path() / "dscore-ompi-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) {
      session_base = pattern;
      overrides["OMPI_MCA_orte_tmpdir_base"] = session_base;
    }
  }
  struct RemoveBase {
    const std::string& path;
    ~RemoveBase() {
      std::error_code ec;
      if (!path.empty()) fs::remove_all(path, ec);
    }
  } remove_base{session_base};
  // Everything the child needs is built before fork(): after it, only
  // async-signal-safe calls.
  std::vector<std::string> args = argv;
  std::vector<std::string> env = merged_environment(overrides);
  std::vector<char*> c_args = c_strings(args);
  std::vector<char*> c_env = c_strings(env);
  const std::string cwd = options.cwd.string();

  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    setsid();
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    // Tests crash children on purpose; keep core files out of the tree.
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    execve(c_args[0], c_args.data(), c_env.data());
    const char msg[] = "run_process: execve failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);

  ProcessResult result;
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_count = 2;
  while (open_count > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[8192];
      ssize_t got = read(fds[i].fd, buffer, sizeof buffer);
      if (got > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;  // poll ignores negative descriptors
        --open_count;
      }
    }
  }
  for (pollfd& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  if (result.timed_out && options.descendants_grace.count() > 0)
    result.descendants_outlived = session_outlived(pid, options.descendants_grace);
  return result;
}

ProcessResult run_dscore_at(const fs::path& exe, const std::vector<std::string>& args,
                            ProcessOptions options) {
  for (const char* name : {"DSCORE_PLUGIN_PATH", "DSCORE_LOG_LEVEL"})
    options.env.try_emplace(name, std::nullopt);
  std::vector<std::string> argv = {exe.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, options);
}

ProcessResult run_dscore(const std::vector<std::string>& args, ProcessOptions options) {
  return run_dscore_at(DSCORE_EXE, args, std::move(options));
}

EnvOverrides mpi_test_env() {
  const char* current = std::getenv("ASAN_OPTIONS");
  std::string options = current != nullptr && *current != '\0' ? std::string(current) + ":" : "";
  return {{"ASAN_OPTIONS", options + "detect_leaks=0"}};
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> lines_starting_with(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& line : split_lines(text))
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

std::vector<double> read_csv_values(const std::filesystem::path& path) {
  std::vector<double> values;
  const std::vector<std::string> lines = split_lines(read_text_file(path));
  for (size_t i = 1; i < lines.size(); ++i)  // after "step,<name>"
    if (!lines[i].empty()) values.push_back(std::stod(lines[i].substr(lines[i].find(',') + 1)));
  return values;
}

}  // namespace dscore::testing
