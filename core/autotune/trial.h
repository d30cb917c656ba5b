// One trial of `dscore autotune`: `dscore run` on a candidate's config in a
// child process (its own process group, so a timeout ends mpirun and every
// rank), its stdout and stderr kept in the trial's folder, and the metric
// read from its JSON progress records over the profiled steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::autotune {

struct TrialProcess {
  std::vector<std::string> argv;           // argv[0] is a path
  std::string folder;                      // stdout.log and stderr.log go here
  std::map<std::string, std::string> env;  // added to this process's environment
  std::chrono::seconds timeout{600};
};

struct TrialExit {
  int exit_code = -1;  // -1 unless it exited
  int signal = 0;      // the signal that ended it
  bool timed_out = false;
  int64_t peak_rss_bytes = 0;  // the largest of the process and the ranks it waited for
  double wall_seconds = 0;
  bool ok() const { return exit_code == 0 && signal == 0 && !timed_out; }
};

// Starts the process, waits for it (killing its group at the timeout) and
// says how it ended; an error only when it could not be started.
Result<TrialExit> run_trial_process(const TrialProcess& trial);

// A `dscore run --log-format json` progress record.
struct ProgressPoint {
  int64_t step = 0;
  int64_t samples = 0;
  double elapsed_seconds = 0;
};
// The progress records of a run's stdout (other lines are skipped).
std::vector<ProgressPoint> read_progress(const std::string& stdout_text);

// The profiled window, steps start..end (1-based, inclusive): seconds per
// step and samples per second, timed from the record of step start - 1
// (the run's start for step 1) to that of step end. An error says which
// step is missing.
struct WindowRate {
  double seconds_per_step = 0;
  double samples_per_second = 0;
};
Result<WindowRate> window_rate(const std::vector<ProgressPoint>& points, int64_t start,
                               int64_t end);

// What went wrong in a trial, in one line: the last "error" line of its
// stderr, or its last line, after how it ended.
std::string failure_reason(const TrialExit& exit, const std::string& stderr_text);

}  // namespace dscore::autotune
