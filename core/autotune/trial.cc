#include "core/autotune/trial.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>

#include "core/config/json.h"

namespace dscore::autotune {
namespace {

// In the child, between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(const std::vector<char*>& argv, const std::vector<char*>& envp,
                             const std::string& out, const std::string& err) {
  setpgid(0, 0);
  const int in_fd = open("/dev/null", O_RDONLY);
  const int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in_fd < 0 || out_fd < 0 || err_fd < 0) _exit(127);
  dup2(in_fd, STDIN_FILENO);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  execve(argv[0], argv.data(), envp.data());
  _exit(127);
}

const char* signal_name(int sig) {
  const char* name = sigdescr_np(sig);
  return name != nullptr ? name : "unknown signal";
}

}  // namespace

Result<TrialExit> run_trial_process(const TrialProcess& trial) {
  if (trial.argv.empty()) return invalid_argument("a trial needs a command");
  std::vector<std::string> argv = trial.argv;
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  const std::string out = trial.folder + "/stdout.log";
  const std::string err = trial.folder + "/stderr.log";
  // This process's environment with trial.env's variables set.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (!trial.env.contains(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [name, value] : trial.env) env.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) exec_child(c_argv, envp, out, err);
  if (pid < 0) return internal_error(std::string("cannot start a trial: ") + std::strerror(errno));
  setpgid(pid, pid);  // also here, so the group exists before any kill
  TrialExit result;
  int status = 0;
  rusage usage{};
  const auto deadline = start + trial.timeout;
  for (;;) {
    const pid_t done = wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) break;
    if (done < 0 && errno != EINTR)
      return internal_error(std::string("waiting for a trial: ") + std::strerror(errno));
    if (std::chrono::steady_clock::now() >= deadline) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      while (wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  if (!result.timed_out) {
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  }
  // Ranks a failed launcher left behind (a clean exit waited for them).
  if (!result.ok()) kill(-pid, SIGKILL);
  return result;
}

std::vector<ProgressPoint> read_progress(const std::string& stdout_text) {
  std::vector<ProgressPoint> points;
  std::istringstream in(stdout_text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"type\":\"progress\"") == std::string::npos) continue;
    auto v = json::parse(line, "progress");
    if (!v.ok() || !v->is_object()) continue;
    const json::Value* step = v->find("step");
    const json::Value* samples = v->find("samples");
    const json::Value* elapsed = v->find("elapsed_seconds");
    if (step == nullptr || !step->is_int() || samples == nullptr || !samples->is_int() ||
        elapsed == nullptr || !elapsed->is_number())
      continue;
    points.push_back({step->as_int(), samples->as_int(), elapsed->as_number()});
  }
  return points;
}

Result<WindowRate> window_rate(const std::vector<ProgressPoint>& points, int64_t start,
                               int64_t end) {
  auto at = [&](int64_t step) -> const ProgressPoint* {
    for (const ProgressPoint& p : points)
      if (p.step == step) return &p;
    return nullptr;
  };
  ProgressPoint origin;  // step 0: the run's start
  const ProgressPoint* first = start == 1 ? &origin : at(start - 1);
  const ProgressPoint* last = at(end);
  if (first == nullptr || last == nullptr)
    return invalid_argument("no progress record of step " +
                            std::to_string(first == nullptr ? start - 1 : end) +
                            " (the run ended before the profiled steps)");
  const double seconds = last->elapsed_seconds - first->elapsed_seconds;
  if (!(seconds > 0)) return invalid_argument("the profiled steps took no measurable time");
  WindowRate rate;
  rate.seconds_per_step = seconds / static_cast<double>(end - start + 1);
  rate.samples_per_second = static_cast<double>(last->samples - first->samples) / seconds;
  return rate;
}

std::string failure_reason(const TrialExit& exit, const std::string& stderr_text) {
  std::string how = exit.timed_out ? "timed out"
                    : exit.signal != 0
                        ? std::string("killed by signal ") + std::to_string(exit.signal) + " (" +
                              signal_name(exit.signal) + ")"
                        : "exit " + std::to_string(exit.exit_code);
  std::string last, last_error;
  std::istringstream in(stderr_text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    // A trial logs JSON lines (--log-format json): their message.
    bool error = line.find("error") != std::string::npos;
    if (auto v = json::parse(line, "log"); v.ok() && v->is_object()) {
      const json::Value* message = v->find("message");
      const json::Value* level = v->find("level");
      if (message != nullptr && message->is_string()) {
        error = level != nullptr && level->is_string() && level->as_string() == "error";
        line = (error ? "error: " : "") + message->as_string();
      }
    }
    last = line;
    if (error) last_error = line;
  }
  const std::string& said = last_error.empty() ? last : last_error;
  return said.empty() ? how : how + ": " + said;
}

}  // namespace dscore::autotune
