// The crash handler (core/plugin_host/crash_handler.cc) in a real crash: a
// child process runs a plugin whose step() dereferences NULL; its stderr
// must name the plugin and the function, and it must still die of SIGSEGV
// (exit status and core dumps unchanged).
#include "core/plugin_host/crash_handler.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "core/plugin_host/call.h"
#include "core/plugin_host/instances.h"
#include "tests/core/plugin_host/test_plugins.h"

namespace dscore::plugin_host {
namespace {

struct ChildResult {
  std::string stderr_text;
  int signal = 0;  // the signal that ended it, 0 if it exited
  int exit_code = -1;
};

// Runs `body` in a forked child whose stderr is captured. The body should
// not return; if it does, the child exits with code 3.
ChildResult run_in_child(const std::function<void()>& body) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    // Start from the default actions (a sanitizer runtime installs its own),
    // so the handler's re-raise must end the child with the signal itself.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, SIG_DFL);
    body();
    _exit(3);
  }
  close(fds[1]);
  ChildResult result;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0) result.stderr_text.append(buffer, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

TEST(CrashHandler, SegfaultInsideAPluginNamesThePluginAndFunctionAndStillKills) {
  const std::string display =
      "optimizer 'fake_segv' (" + testing::test_plugin_file("fake_segv") + ")";
  ChildResult r = run_in_child([] {
    install_crash_handler();
    auto registry = PluginRegistry::open(testing::folders_of({"fake_segv"}));
    if (!registry.ok()) _exit(10);
    auto info = (*registry)->find(DSCORE_KIND_OPTIMIZER, "fake_segv");
    if (!info.ok()) _exit(11);
    auto opt = OptimizerInstance::create(
        **info, ValidatedParams::from_object(json::Value::object(), json::Value::object()),
        InstanceContext{});
    if (!opt.ok()) _exit(12);
    dscore_optimizer_hparams hp{sizeof hp, 0.1, 0, 0, 0, 1, 1, 1, 0};
    dscore_optimizer_step_args args{sizeof args, &hp,     0,       nullptr, nullptr,
                                    0,           nullptr, nullptr, nullptr};
    (void)(*opt)->step(args);
  });
  EXPECT_EQ(r.signal, SIGSEGV) << "exit code " << r.exit_code << ", stderr: " << r.stderr_text;
  EXPECT_NE(
      r.stderr_text.find("dscore: fatal signal SIGSEGV while running step of " + display + "\n"),
      std::string::npos)
      << r.stderr_text;
}

TEST(CrashHandler, CrashOutsideAnyPluginSaysDscoreItself) {
  ChildResult r = run_in_child([] {
    install_crash_handler();
    raise(SIGSEGV);
  });
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_EQ(r.stderr_text, "dscore: fatal signal SIGSEGV in dscore itself\n");
}

TEST(CrashHandler, AbortInsideAPluginCallIsReportedAndStillAborts) {
  ChildResult r = run_in_child([] {
    install_crash_handler();
    install_crash_handler();  // idempotent
    HostContext host;
    (void)call_plugin(host, "monitor 'm' (/p/libm.so)", "flush",
                      []() -> dscore_status { std::abort(); });
  });
  EXPECT_EQ(r.signal, SIGABRT);
  EXPECT_EQ(r.stderr_text,
            "dscore: fatal signal SIGABRT while running flush of monitor 'm' (/p/libm.so)\n");
}

TEST(CrashHandler, StackOverflowIsReportedFromTheAlternateStack) {
  ChildResult r = run_in_child([] {
    install_crash_handler();
    PluginCallScope scope("model 'deep' (/p/libdeep.so)", "forward");
    struct Recurse {
      // Recurses until the stack runs out (the guard never triggers; it
      // only tells the compiler the recursion can end).
      static int down(int depth) {
        volatile char pad[4096];
        pad[0] = static_cast<char>(depth);
        if (depth < 0) return pad[0];
        return down(depth + 1) + pad[0];
      }
    };
    Recurse::down(0);
  });
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_EQ(r.stderr_text,
            "dscore: fatal signal SIGSEGV while running forward of model 'deep' (/p/libdeep.so)\n");
}

}  // namespace
}  // namespace dscore::plugin_host
