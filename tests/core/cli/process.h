// Test support for the CLI and install tests: run a real program as a child
// process (argv, environment overrides, working directory) and capture its
// stdout, stderr and how it ended, separately; a per-test temporary folder;
// small text helpers for checking one-line error messages.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/fakes/temp_dir.h"

namespace dscore::testing {

struct ProcessResult {
  std::string out;     // everything written to stdout
  std::string err;     // everything written to stderr
  int exit_code = -1;  // the exit status; -1 if it did not exit normally
  int signal = 0;      // the signal that killed it; 0 if it exited
  bool timed_out = false;
  // After a timeout: processes the child started (its session) still ran
  // when ProcessOptions::descendants_grace ended; they were then killed.
  bool descendants_outlived = false;
  bool exited() const { return signal == 0 && exit_code >= 0 && !timed_out; }
  // "exit 2" / "killed by signal 11" / "timed out", plus both streams: for
  // failure messages.
  std::string describe() const;
};

// Environment changes: a value sets the variable, std::nullopt removes it.
using EnvOverrides = std::map<std::string, std::optional<std::string>>;

struct ProcessOptions {
  EnvOverrides env;
  std::filesystem::path cwd;                  // empty = the test's own working directory
  std::chrono::milliseconds timeout{120000};  // then SIGKILL and timed_out = true
  // After that SIGKILL, how long to wait for the processes the child started
  // (mpirun's ranks) to end before returning; 0: not waited for.
  std::chrono::milliseconds descendants_grace{0};
};

// Runs argv[0] (a path; no PATH lookup) with argv, leading a session of its
// own. stdin is /dev/null; core dumps are off (tests crash children on purpose).
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

// Runs the build's dscore executable with `args`. DSCORE_PLUGIN_PATH and
// DSCORE_LOG_LEVEL are removed from the environment unless `options.env`
// sets them, so the user's own settings never leak into a test.
ProcessResult run_dscore(const std::vector<std::string>& args, ProcessOptions options = {});
ProcessResult run_dscore_at(const std::filesystem::path& exe, const std::vector<std::string>& args,
                            ProcessOptions options = {});

// Environment for processes that run MPI (mpirun, `dscore run -n`): the
// current ASAN_OPTIONS plus detect_leaks=0. OpenMPI 4.1 keeps allocations
// until exit and unloads its components at MPI_Finalize, so LeakSanitizer
// sees them with unsymbolised stacks that no suppression can name; ASan and
// UBSan stay fully on. Harmless in builds without sanitizers.
EnvOverrides mpi_test_env();

std::string read_text_file(const std::filesystem::path& path);
std::vector<std::string> split_lines(const std::string& text);  // "\n" or "\r\n"
// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting_with(const std::string& text, const std::string& prefix);
// The values of a csv_monitor file ("step,value" rows after the header).
std::vector<double> read_csv_values(const std::filesystem::path& path);

}  // namespace dscore::testing
